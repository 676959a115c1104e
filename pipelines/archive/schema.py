"""The archive's Parquet schema of a declared topic.

Each topic's events are archived with the columns its declaration names (the event time, the
body's fields, the record's columns), followed by where each record sat in Kafka. Types map
one to one: string -> string, long -> int64, double -> float64, boolean -> bool, timestamp
-> int64 epoch milliseconds UTC (as the stream holds it; the field's metadata says it is a
timestamp). A column is nullable when its declaration lets it be null; the event time and
the Kafka columns never are.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines.events.declaration import (
    ARCHIVE_COLUMNS,
    EVENT_TIME,
    ColumnType,
    TopicDeclaration,
)

__all__ = ["ARCHIVE_COLUMNS", "TYPE_METADATA", "archive_schema", "arrow_type", "column_type"]

TYPE_METADATA = b"sluice.type"
"""Field metadata key: the declared column type (``timestamp`` is not visible in int64)."""

_ARROW = {
    ColumnType.STRING: pa.string(),
    ColumnType.LONG: pa.int64(),
    ColumnType.DOUBLE: pa.float64(),
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.TIMESTAMP: pa.int64(),
}
_KAFKA = (
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("kafka_timestamp", pa.int64(), nullable=False),
)
assert tuple(f.name for f in _KAFKA) == ARCHIVE_COLUMNS


def arrow_type(kind: ColumnType) -> pa.DataType:
    """The Arrow (and Parquet) type a column of ``kind`` is archived as."""
    return _ARROW[kind]


def column_type(field: pa.Field) -> ColumnType:
    """The declared type of an archived column, read back from its metadata."""
    return ColumnType((field.metadata or {})[TYPE_METADATA].decode())


def archive_schema(declaration: TopicDeclaration) -> pa.Schema:
    """The columns of ``declaration``'s archived events, in the declaration's order, then
    the record's place in Kafka (``topic``, ``partition``, ``offset``, ``kafka_timestamp``)."""
    nullable = declaration.stored_nullable_columns()
    fields = [
        pa.field(
            name,
            arrow_type(kind),
            nullable=name in nullable,
            metadata={TYPE_METADATA: kind.value.encode()},
        )
        for name, kind in declaration.stored_columns().items()
    ]
    assert fields[0].name == EVENT_TIME
    return pa.schema([*fields, *_KAFKA])
