"""A topic's declared schema: the fields its messages carry, its event time, its id.

A team declares each topic once, in the views file beside ``views:`` (``topics:``), and
every layer reads its events through that declaration: the decoder, the views' validation,
the archive, the correction, the tables and the checks. The generator's topic is one such
declaration (``data/views.yaml``), not a special case.

A declaration names *columns*. Each field says where its value is in a message (``path``,
dotted into nested objects, ``[i]`` for an array element; the column's name by default) and
its type; the event time is a field with a format, or the Kafka record's own timestamp; the
record's key, timestamp, partition, offset and headers may be columns too, and ``derived:``
columns computed from the others (:mod:`pipelines.expressions.derived`).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from pipelines.events.column_types import ColumnType
from pipelines.expressions.derived import Derived, ExpressionError, parse_derived

__all__ = [
    "ARCHIVE_COLUMNS",
    "EVENT_TIME",
    "EVENT_TIME_MAX_MS",
    "EVENT_TIME_MIN_MS",
    "ColumnType",
    "DerivedColumn",
    "EventTime",
    "FieldDeclaration",
    "RecordColumns",
    "TimeFormat",
    "TopicDeclaration",
    "parse_path",
]

EVENT_TIME = "event_time"
"""The column every decoded event has: its event time, epoch milliseconds UTC."""

EVENT_TIME_MIN_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
EVENT_TIME_MAX_MS = 4_102_444_800_000  # 2100-01-01T00:00:00Z
"""An event time outside [min, max) is ``out_of_range``: a clock or a unit gone wrong."""

ARCHIVE_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp")
"""Where each archived record sat in Kafka: the archive's own columns, which no declared
column may be named (declare the record's partition or offset under ``record:``)."""


class TimeFormat(StrEnum):
    """How a time field's value reads as an instant."""

    EPOCH_S = "epoch_s"
    EPOCH_MS = "epoch_ms"
    EPOCH_US = "epoch_us"
    EPOCH_NS = "epoch_ns"
    ISO8601 = "iso8601"
    """A string with ``Z`` or a UTC offset (``2014-07-01T08:00:00.250+02:00``)."""
    PATTERN = "pattern"
    """A string read with the declaration's strptime ``pattern`` in its ``zone``."""


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_PATH_PART = re.compile(r"^([^.\[\]]+)((?:\[\d+\])*)$")


def parse_path(path: str) -> tuple[str | int, ...]:
    """``route.origin`` -> ("route", "origin"); ``items[0].sku`` -> ("items", 0, "sku")."""
    steps: list[str | int] = []
    for part in path.split("."):
        match = _PATH_PART.match(part)
        if match is None:
            raise ValueError(
                f"bad path {path!r}: dotted names, each optionally followed by [index]"
            )
        steps.append(match.group(1))
        steps += [int(i) for i in re.findall(r"\[(\d+)\]", match.group(2))]
    return tuple(steps)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldDeclaration(_Model):
    """One column read from the message's body."""

    name: str = Field(description="The column's name, as views, filters and tables use it.")
    type: ColumnType = Field(description="string, long, double, boolean or timestamp.")
    path: str | None = Field(
        default=None,
        description="Where the value is: dotted into nested objects, [i] for an array "
        "element (e.g. card.country, items[0].sku). Default: the column's name.",
    )
    nullable: bool = Field(
        default=False,
        description="Whether the value may be null or absent (else the message is refused).",
    )
    format: TimeFormat | None = Field(
        default=None, description="For a timestamp: how its value reads (default epoch_ms)."
    )
    doc: str = Field(default="", description="What the column means, for listings.")
    minimum: int | float | None = Field(
        default=None,
        description="For a long or double: the smallest value it may take (a smaller one is "
        "out_of_range).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"bad column name {value!r}: letters, digits and _, at most 64")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None:
            parse_path(value)
        return value

    @model_validator(mode="after")
    def _supported(self) -> FieldDeclaration:
        if self.format is TimeFormat.PATTERN:
            raise ValueError(
                f"{self.name}: format: pattern is for the event time only for now (its pattern "
                "and zone are declared under event_time:)"
            )
        return self

    @property
    def steps(self) -> tuple[str | int, ...]:
        return parse_path(self.path or self.name)


class EventTime(_Model):
    """Where an event's time comes from: a field with its format, or the record's timestamp."""

    source: Literal["field", "record"] = Field(
        default="field", description="field: a field of the message; record: Kafka's timestamp."
    )
    path: str | None = Field(
        default=None, description="The field's path (source: field); default event_time."
    )
    format: TimeFormat = Field(default=TimeFormat.EPOCH_MS, description="The field's format.")
    pattern: str | None = Field(
        default=None, description="strptime pattern (format: pattern), e.g. %d/%m/%Y %H:%M:%S."
    )
    zone: str = Field(
        default="UTC", description="IANA zone of a pattern without an offset (format: pattern)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> EventTime:
        if self.source == "record" and self.path is not None:
            raise ValueError("source: record takes no path (the record's timestamp is used)")
        if (self.format is TimeFormat.PATTERN) != (self.pattern is not None):
            raise ValueError("a pattern goes with format: pattern, and only with it")
        if self.path is not None:
            parse_path(self.path)
        return self

    @property
    def steps(self) -> tuple[str | int, ...]:
        return parse_path(self.path or EVENT_TIME)


class RecordColumns(_Model):
    """The Kafka record's own parts, as columns (each unset: not a column)."""

    key: str | None = Field(default=None, description="Column of the record's key (string).")
    timestamp: str | None = Field(
        default=None, description="Column of the record's timestamp (timestamp)."
    )
    partition: str | None = Field(default=None, description="Column of the partition (long).")
    offset: str | None = Field(default=None, description="Column of the offset (long).")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Column name -> header name (string, nullable)."
    )

    def columns(self) -> dict[str, ColumnType]:
        found: dict[str, ColumnType] = {}
        for name, kind in (
            (self.key, ColumnType.STRING),
            (self.timestamp, ColumnType.TIMESTAMP),
            (self.partition, ColumnType.LONG),
            (self.offset, ColumnType.LONG),
        ):
            if name is not None:
                found[name] = kind
        found.update(dict.fromkeys(self.headers, ColumnType.STRING))
        return found


class DerivedColumn(_Model):
    """A column computed from the topic's other columns (:mod:`pipelines.expressions.derived`):
    the stream, the correction and the reconciliation compute it alike, at read time."""

    name: str = Field(description="The column's name, as views, filters and tables use it.")
    expr: str = Field(
        description="What it is: lower(), upper(), coalesce(a, b, ...), hour(ts), weekday(ts) "
        "or abs() of columns and literals, e.g. coalesce(card_country, 'unknown'). Its type is "
        "inferred."
    )
    doc: str = Field(default="", description="What the column means, for listings.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"bad column name {value!r}: letters, digits and _, at most 64")
        return value


class TopicDeclaration(_Model):
    """What a topic's messages hold, declared once for every view that reads it."""

    topic: str = Field(description="The Kafka topic.")
    encoding: Literal["json", "avro"] = Field(
        default="json",
        description="How messages are encoded: json (UTF-8), or avro (through the schema "
        "registry, SLUICE_SCHEMA_REGISTRY_URL, or with schema_file).",
    )
    schema_file: str | None = Field(
        default=None,
        description="avro: the writer's schema (.avsc), relative to the file that declares the "
        "topic; without it, each message's schema id is resolved through the schema registry.",
    )
    framing: Literal["confluent", "plain"] = Field(
        default="confluent",
        description="avro: confluent (a magic byte 0 and a 4-byte schema id before the body), "
        "or plain (the Avro body alone; with schema_file only).",
    )
    fields: tuple[FieldDeclaration, ...] = Field(
        default=(),
        description="The body's columns. For avro they may be left out: they are then read "
        "from the schema (schema_file, or the registry's latest for subject <topic>-value).",
    )
    event_time: EventTime = Field(default_factory=EventTime, description="The event time.")
    id: str | None = Field(
        default=None,
        description="A column that identifies an event: the correction keeps one event per "
        "id. Without one, every archived record counts (a producer's retry counts twice).",
    )
    record: RecordColumns = Field(
        default_factory=RecordColumns, description="The record's key, timestamp, ... as columns."
    )
    derived: tuple[DerivedColumn, ...] = Field(
        default=(),
        description="Columns computed from the others, in order (one may read an earlier one).",
    )
    on_type_error: Literal["dead_letter", "null"] = Field(
        default="dead_letter",
        description="A value that does not fit its type: dead-letter the message "
        "(schema_mismatch), or keep it with the field null.",
    )
    description: str = Field(default="", description="What the topic carries.")
    _derived: tuple[Derived, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _consistent(self) -> TopicDeclaration:
        if self.encoding == "json" and (
            self.schema_file is not None or self.framing != "confluent"
        ):
            raise ValueError("schema_file and framing are for encoding: avro")
        if self.framing == "plain" and self.schema_file is None:
            raise ValueError("framing: plain carries no schema id: it needs a schema_file")
        if not self.fields:
            if self.encoding == "json":
                raise ValueError("fields: required for encoding: json")
            return self  # read from the Avro schema when the declaration is loaded
        names = [f.name for f in self.fields] + list(self.record.columns())
        names += [d.name for d in self.derived]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"columns declared twice: {', '.join(repeated)}")
        taken = sorted(n for n in names if n in ARCHIVE_COLUMNS or n.startswith("__"))
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: the archive's own column names ({', '.join(ARCHIVE_COLUMNS)}"
                " and names starting with __) cannot be declared; name the column otherwise"
            )
        if EVENT_TIME in names:
            raise ValueError(
                f"{EVENT_TIME!r} is the decoded event time: declare where it comes from under "
                "event_time: and name the field's column otherwise"
            )
        if self.id is not None and self.id not in names:
            raise ValueError(f"id {self.id!r} is not a declared column")
        if self.id is not None and self.id in {d.name for d in self.derived}:
            raise ValueError(f"id {self.id!r} is a derived column: name a field or record column")
        self._derived = self._parse_derived()
        return self

    def _parse_derived(self) -> tuple[Derived, ...]:
        """Each derived column parsed over the columns before it, its type inferred."""
        columns = self.stored_columns()
        nullable = set(self.stored_nullable_columns())
        parsed = []
        for i, column in enumerate(self.derived):
            try:
                found = parse_derived(column.name, column.expr, columns, frozenset(nullable))
            except ExpressionError as exc:
                raise ValueError(f"derived[{i}] ({column.name}): {exc}") from exc
            parsed.append(found)
            columns = {**columns, column.name: found.type}
            if found.nullable:
                nullable.add(column.name)
        return tuple(parsed)

    def derived_columns(self) -> tuple[Derived, ...]:
        """The derived columns, parsed, in declared order."""
        return self._derived

    def columns(self) -> dict[str, ColumnType]:
        """Every column a view may use, by name: the event time, the body's, the record's,
        the derived ones."""
        found = self.stored_columns()
        found.update({d.name: d.type for d in self._derived})
        return found

    def stored_columns(self) -> dict[str, ColumnType]:
        """The columns read from each record (all but the derived ones, which are computed
        from them wherever they are read)."""
        found = {EVENT_TIME: ColumnType.TIMESTAMP}
        found.update({f.name: f.type for f in self.fields})
        found.update(self.record.columns())
        return found

    def nullable_columns(self) -> frozenset[str]:
        """Columns that may hold null: nullable fields, every field under ``on_type_error:
        null``, the record's key and headers, derived columns of those (but a coalesce of
        which one value is never null)."""
        return self.stored_nullable_columns() | {d.name for d in self._derived if d.nullable}

    def stored_nullable_columns(self) -> frozenset[str]:
        """:meth:`nullable_columns` of :meth:`stored_columns`."""
        soft = self.on_type_error == "null"
        found = {f.name for f in self.fields if f.nullable or soft}
        if self.record.key is not None:
            found.add(self.record.key)
        found.update(self.record.headers)
        return frozenset(found)

    def column_names(self) -> list[str]:
        return list(self.columns())
