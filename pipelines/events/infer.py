"""Propose a topic's declaration from a sample of its messages, marking what it cannot tell.

Each leaf of the JSON objects becomes a column (arrays by their first element); its type is
what every sampled value fits. Where the sample leaves a choice open (mixed types, a number
that may be epoch seconds or a count, numbers written as strings, several time candidates)
the proposal says so in a note on that column instead of guessing silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from pipelines.events.declaration import EVENT_TIME, ColumnType, TimeFormat, TopicDeclaration
from pipelines.events.times import epoch_format_of, read_time_ms

__all__ = ["Inference", "infer_declaration"]

STRPTIME_PATTERNS = (
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%d/%m/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M:%S",
    "%d/%b/%Y:%H:%M:%S %z",
    "%Y-%m-%d",
)
"""Time patterns tried on strings that are not ISO-8601 with a zone."""

_TIME_NAME = re.compile(r"(time|date|_at$|^at$|^ts$|_ts$|timestamp|created|updated)", re.I)
_NUMBER = re.compile(r"^\s*-?\d+(\.\d+)?([eE][-+]?\d+)?\s*$")
_OFFSET = re.compile(r"(Z|z|[+-]\d\d:?\d\d)$")


@dataclass
class _Leaf:
    """What the sample held at one path."""

    path: str
    present: int = 0
    nulls: int = 0
    kinds: set[str] = field(default_factory=set)
    strings: list[str] = field(default_factory=list)
    numbers: list[float] = field(default_factory=list)


@dataclass
class Inference:
    """A proposed declaration, the notes on what the sample left open, and what was read."""

    declaration: TopicDeclaration
    notes: dict[str, list[str]]
    """Per column (or ``event_time``, ``id``, ``topic``): why its proposal is uncertain."""
    sampled: int
    not_objects: int
    """Messages that were not JSON objects: counted, not read."""

    def as_yaml(self) -> str:
        """A ``topics:`` entry to paste, each uncertain line followed by ``# ambiguous: ...``."""
        decl = self.declaration.model_dump(mode="json", exclude_defaults=True)
        lines = [
            f"# Proposed by `sluice schema infer` from {self.sampled:,} messages of "
            f"{self.declaration.topic}"
            + (f" ({self.not_objects:,} not JSON objects, skipped)" if self.not_objects else "")
            + ".",
            "# Check each `# ambiguous:` line before using it.",
        ]
        lines += [f"# ambiguous: {note}" for note in self.notes.get("topic", [])]
        lines += ["topics:", f"  - topic: {_flow(decl['topic'])}"]
        if "event_time" in decl:
            lines.append(f"    event_time: {_flow(decl['event_time'])}{_comment(self, EVENT_TIME)}")
        else:
            lines.append(f"    event_time: {{source: record}}{_comment(self, EVENT_TIME)}")
        if "id" in decl:
            lines.append(f"    id: {_flow(decl['id'])}{_comment(self, 'id')}")
        lines.append("    fields:")
        for column in decl["fields"]:
            lines.append(f"      - {_flow(column)}{_comment(self, column['name'])}")
        return "\n".join(lines) + "\n"

    def as_json(self) -> str:
        """The entry under ``topics``, the notes as a list, and the sample's counts."""
        notes = [f"{where}: {note}" for where, found in self.notes.items() for note in found]
        return json.dumps(
            {
                "topics": [self.declaration.model_dump(mode="json", exclude_defaults=True)],
                "notes": notes,
                "sampled": self.sampled,
                "not_objects": self.not_objects,
            },
            indent=2,
        )


def _flow(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a YAML scalar too, quoted
    return yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()


def _comment(inference: Inference, where: str) -> str:
    notes = inference.notes.get(where)
    return f"  # ambiguous: {'; '.join(notes)}" if notes else ""


def _leaves(value: Any, path: str, found: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _leaves(inner, f"{path}.{key}" if path else str(key), found)
    elif isinstance(value, list):
        if value:
            _leaves(value[0], f"{path}[0]", found)
    else:
        found[path] = value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    return "string"


def _column_name(path: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_]+", "_", path).strip("_") or "field"
    if not re.match(r"^[A-Za-z_]", name):
        name = f"f_{name}"
    name = name[:60]
    if name == EVENT_TIME:
        name = f"{EVENT_TIME}_field"
    base, n = name, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _time_of_strings(values: list[str]) -> tuple[TimeFormat, str | None, list[str]] | None:
    """How every string reads as a time (format, pattern, notes), or None."""
    if all(_OFFSET.search(v) for v in values):
        try:
            for v in values:
                read_time_ms(v, TimeFormat.ISO8601)
            return TimeFormat.ISO8601, None, []
        except (ValueError, TypeError):
            pass
    fitting = []
    for pattern in STRPTIME_PATTERNS:
        try:
            for v in values:
                datetime.strptime(v, pattern)
        except ValueError:
            continue
        fitting.append(pattern)
    if not fitting:
        return None
    notes = []
    if len(fitting) > 1:
        notes.append(f"the values fit several patterns ({', '.join(fitting)}); took the first")
    if "%z" not in fitting[0]:
        notes.append("the values carry no zone: UTC assumed, set zone: if not")
    return TimeFormat.PATTERN, fitting[0], notes


@dataclass
class _Column:
    name: str
    leaf: _Leaf
    type: ColumnType
    nullable: bool
    notes: list[str]
    time: tuple[TimeFormat, str | None] | None = None
    unique_string: bool = False


def _column(leaf: _Leaf, name: str, objects: int) -> _Column:
    notes: list[str] = []
    kinds = leaf.kinds
    nullable = leaf.nulls > 0 or leaf.present < objects
    time: tuple[TimeFormat, str | None] | None = None
    if not kinds:
        notes.append("always null in the sample: type unknown, string assumed")
        return _Column(name, leaf, ColumnType.STRING, True, notes)
    if kinds == {"boolean"}:
        return _Column(name, leaf, ColumnType.BOOLEAN, nullable, notes)
    if kinds <= {"long", "double"}:
        kind = ColumnType.LONG if kinds == {"long"} else ColumnType.DOUBLE
        units = {epoch_format_of(v) for v in leaf.numbers}
        if len(units) == 1 and None not in units:
            unit = units.pop()
            time = (unit, None)
            if _TIME_NAME.search(leaf.path):
                kind = ColumnType.TIMESTAMP
                if unit is TimeFormat.EPOCH_S:
                    notes.append("read as epoch seconds: may be a count in that range")
            else:
                notes.append(
                    f"a number that may be an epoch time ({unit.value}) or a count: "
                    f"declared {kind.value}"
                )
        return _Column(name, leaf, kind, nullable, notes, time)
    if kinds == {"string"}:
        values = leaf.strings
        read = _time_of_strings(values)
        if read is not None:
            fmt, pattern, time_notes = read
            time = (fmt, pattern)
            if fmt is TimeFormat.ISO8601:
                return _Column(name, leaf, ColumnType.TIMESTAMP, nullable, time_notes, time)
            notes += time_notes
            notes.append(
                f"times read with pattern {pattern}: declared string (only the event time "
                "takes a pattern)"
            )
        elif values and all(_NUMBER.match(v) for v in values):
            notes.append("numbers written as strings: declared string")
        elif any(_NUMBER.match(v) for v in values):
            notes.append("some values look like numbers, some do not: declared string")
        unique = len(values) >= 2 and len(set(values)) == len(values) and not nullable
        return _Column(name, leaf, ColumnType.STRING, nullable, notes, time, unique)
    notes.append(f"mixed types in the sample ({', '.join(sorted(kinds))}): declared string")
    return _Column(name, leaf, ColumnType.STRING, nullable, notes)


def infer_declaration(messages: Iterable[bytes | str], topic: str) -> Inference:
    """Propose ``topic``'s declaration from ``messages`` (JSON objects; others are counted)."""
    leaves: dict[str, _Leaf] = {}
    objects = not_objects = 0
    for raw in messages:
        try:
            value = json.loads(raw)
        except (ValueError, TypeError):
            value = None
        if not isinstance(value, dict):
            not_objects += 1
            continue
        objects += 1
        found: dict[str, Any] = {}
        _leaves(value, "", found)
        for path, leaf_value in found.items():
            leaf = leaves.setdefault(path, _Leaf(path))
            leaf.present += 1
            if leaf_value is None:
                leaf.nulls += 1
                continue
            kind = _kind(leaf_value)
            leaf.kinds.add(kind)
            if kind == "string":
                leaf.strings.append(leaf_value)
            elif kind in ("long", "double"):
                leaf.numbers.append(leaf_value)
    notes: dict[str, list[str]] = {}
    if not_objects:
        notes["topic"] = [
            f"{not_objects:,} of {objects + not_objects:,} messages were not JSON objects"
        ]
    if not objects:
        raise ValueError(
            f"no JSON object among {not_objects:,} messages of {topic}: nothing to infer from"
        )
    taken: set[str] = set()
    columns = [_column(leaf, _column_name(path, taken), objects) for path, leaf in leaves.items()]
    event_time = _event_time(columns, notes)
    chosen_time = event_time.get("path") if event_time else None
    body = [c for c in columns if c.leaf.path != chosen_time]
    id_column = _id(body, notes)
    fields = []
    for c in body:
        declared: dict[str, Any] = {"name": c.name, "type": c.type.value}
        if c.leaf.path != c.name:
            declared["path"] = c.leaf.path
        if c.nullable:
            declared["nullable"] = True
        if c.type is ColumnType.TIMESTAMP and c.time is not None:
            declared["format"] = c.time[0].value
        fields.append(declared)
        if c.notes:
            notes[c.name] = c.notes
    entry: dict[str, Any] = {"topic": topic, "fields": fields}
    entry["event_time"] = event_time or {"source": "record"}
    if id_column is not None:
        entry["id"] = id_column
    return Inference(TopicDeclaration.model_validate(entry), notes, objects, not_objects)


def _event_time(columns: list[_Column], notes: dict[str, list[str]]) -> dict[str, Any] | None:
    candidates = [c for c in columns if c.time is not None and not c.nullable]
    if not candidates:
        notes[EVENT_TIME] = ["no field reads as a time in every message: the record's timestamp"]
        return None
    rank = {
        TimeFormat.ISO8601: 0,
        TimeFormat.EPOCH_MS: 1,
        TimeFormat.EPOCH_US: 2,
        TimeFormat.EPOCH_NS: 3,
        TimeFormat.PATTERN: 4,
        TimeFormat.EPOCH_S: 5,
    }
    candidates.sort(key=lambda c: (not _TIME_NAME.search(c.leaf.path), rank[c.time[0]]))
    best = candidates[0]
    said: list[str] = []
    if len(candidates) > 1:
        others = ", ".join(c.leaf.path for c in candidates[1:])
        said.append(f"several time candidates; also {others}")
    if not _TIME_NAME.search(best.leaf.path):
        said.append(f"{best.leaf.path} reads as a time but is not named like one")
    said += [n for n in best.notes if "declared" not in n]
    if said:
        notes[EVENT_TIME] = said
    fmt, pattern = best.time
    chosen: dict[str, Any] = {"path": best.leaf.path, "format": fmt.value}
    if pattern is not None:
        chosen["pattern"] = pattern
    return chosen


def _id(columns: list[_Column], notes: dict[str, list[str]]) -> str | None:
    unique = [c for c in columns if c.type is ColumnType.STRING and c.unique_string]
    if not unique:
        return None
    unique.sort(key=lambda c: not re.search(r"(^|_)id$|uuid", c.name, re.I))
    best = unique[0]
    said = []
    if len(unique) > 1:
        said.append(
            f"several columns unique in the sample; also {', '.join(c.name for c in unique[1:])}"
        )
    if not re.search(r"(^|_)id$|uuid", best.name, re.I):
        said.append(f"{best.name} is unique in the sample but not named as an id")
    if said:
        notes["id"] = said
    return best.name
