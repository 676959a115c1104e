"""A topic's columns read from its Avro schema, so an Avro topic need not repeat them in YAML.

Each leaf of the schema's record becomes a column: ``string`` and ``enum`` -> string,
``int`` and ``long`` -> long, ``float`` and ``double`` -> double, ``boolean`` -> boolean,
``long`` with logical type ``timestamp-millis`` (``timestamp-micros``) -> timestamp
(``epoch_ms``, ``epoch_us``). A union of ``null`` and one type is that type, nullable. A nested
record's fields are columns too, at their dotted path (``card.country`` -> column
``card_country``). Other types (arrays, maps, bytes, fixed, decimals, dates, other unions) are
no columns: declare ``fields:`` to read a value from them.

The field at the event time's path is the event time, not a column.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.events.declaration import (
    ColumnType,
    FieldDeclaration,
    TimeFormat,
    TopicDeclaration,
)

__all__ = ["fields_from_schema", "read_schema_file"]

_PRIMITIVES = {
    "string": ColumnType.STRING,
    "enum": ColumnType.STRING,
    "int": ColumnType.LONG,
    "long": ColumnType.LONG,
    "float": ColumnType.DOUBLE,
    "double": ColumnType.DOUBLE,
    "boolean": ColumnType.BOOLEAN,
}
_TIMES = {"timestamp-millis": TimeFormat.EPOCH_MS, "timestamp-micros": TimeFormat.EPOCH_US}


def read_schema_file(path: str | Path) -> dict[str, Any]:
    """The Avro schema (JSON) of ``path``; raises ValueError naming the file and the problem."""
    try:
        schema = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the Avro schema {path}: {exc}") from exc
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError(f"{path}: the Avro schema of a topic must be a record")
    return schema


def fields_from_schema(
    schema: dict[str, Any], declaration: TopicDeclaration
) -> tuple[FieldDeclaration, ...]:
    """The columns of ``schema`` (an Avro record), the event time's field left out; raises
    ValueError when the event time's field is not in it."""
    found: list[tuple[tuple[str, ...], ColumnType, bool, TimeFormat | None]] = []
    named: dict[str, Any] = {}
    _walk(schema, (), False, named, found)
    time = declaration.event_time
    time_path = time.steps if time.source == "field" else None
    if time_path is not None and not any(tuple(p) == time_path for p, *_ in found):
        raise ValueError(
            f"the event time's field {'.'.join(map(str, time_path))!r} is not a timestamp, long "
            "or string of the Avro schema: declare event_time: (path, format) or source: record"
        )
    return tuple(
        FieldDeclaration(
            name="_".join(path),
            type=kind,
            path=None if len(path) == 1 else ".".join(path),
            nullable=nullable,
            format=fmt,
        )
        for path, kind, nullable, fmt in found
        if tuple(path) != time_path
    )


def _walk(
    schema: Any,
    path: tuple[str, ...],
    nullable: bool,
    named: dict[str, Any],
    found: list[tuple[tuple[str, ...], ColumnType, bool, TimeFormat | None]],
) -> None:
    if isinstance(schema, list):  # a union: ["null", T] is T, nullable; others are no column
        rest = [s for s in schema if s != "null"]
        if len(rest) == 1 and len(schema) == 2:
            _walk(rest[0], path, True, named, found)
        return
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if isinstance(schema.get("name"), str) and kind in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
            if schema.get("namespace"):
                named[f"{schema['namespace']}.{schema['name']}"] = schema
        if kind == "record":
            for field in schema.get("fields", ()):
                _walk(field["type"], (*path, field["name"]), nullable, named, found)
            return
        logical = schema.get("logicalType")
        if logical is not None:
            if kind == "long" and logical in _TIMES and path:
                found.append((path, ColumnType.TIMESTAMP, nullable, _TIMES[logical]))
            return  # decimals, dates, uuids, local times: no column of their own
        schema = kind
    if isinstance(schema, str) and schema in _PRIMITIVES and path:
        found.append((path, _PRIMITIVES[schema], nullable, None))
