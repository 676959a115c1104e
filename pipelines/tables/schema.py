"""A view's table columns: its output columns, the window (or session) bounds, where each row
came from (``source``: realtime or batch) and the batch version (0 for realtime rows); for a
windowed view also each aggregation's state (``<out>__state``, the sketch's or the mergeable
state's bytes) where the correction built one, so corrected hours roll up into days.

A windowed view's grouping columns have their declared types (string, long, double, boolean,
timestamp), whatever the stream's segment files hold them as.

Times are microsecond UTC timestamps (Iceberg's ``timestamptz``); the table is partitioned by
the hour of ``window_start`` (``session_start`` for a session view), the hours Sluice's
segments, corrections and publishes are cut by.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IcebergType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from pipelines.events.declaration import ColumnType
from pipelines.kinds import kind_of
from pipelines.views.model import View
from pipelines.views.topics import declaration_of

__all__ = [
    "BATCH",
    "BATCH_VERSION",
    "REALTIME",
    "SOURCE",
    "arrow_schema",
    "group_types",
    "iceberg_schema",
    "iso_time",
    "partition_field",
    "state_columns",
    "table_rows",
    "time_columns",
]

SOURCE = "source"
BATCH_VERSION = "batch_version"
REALTIME = "realtime"
BATCH = "batch"
TIMESTAMP = pa.timestamp("us", tz="UTC")


def iso_time(ms: int) -> str:
    """Epoch ms as the ISO timestamp pyiceberg's filters compare timestamptz columns with
    (clamped to the years 1-9999: "everything" ranges such as [0, 2**62) stay valid)."""
    ms = min(max(ms, _FIRST_MS), _LAST_MS)
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


_FIRST_MS = int(datetime(1, 1, 2, tzinfo=UTC).timestamp() * 1000)
_LAST_MS = int(datetime(9999, 12, 31, tzinfo=UTC).timestamp() * 1000)


def partition_field(view: View) -> str:
    """The column whose hour partitions the table."""
    return kind_of(view).time_columns[0]


def time_columns(view: View) -> tuple[str, str]:
    return kind_of(view).time_columns


_GROUP_TYPES = {
    ColumnType.STRING: pa.string(),
    ColumnType.LONG: pa.int64(),
    ColumnType.DOUBLE: pa.float64(),
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.TIMESTAMP: TIMESTAMP,
}


def group_types(view: View) -> dict[str, pa.DataType]:
    """The table's type of each of a windowed view's grouping columns: its declared type (a
    column the declaration does not type stays a string)."""
    if not view.grouping_cols:
        return {}
    declared = declaration_of(view).columns()
    return {
        col: _GROUP_TYPES[declared[col]] if col in declared else pa.string()
        for col in view.grouping_cols
    }


def arrow_schema(view: View) -> pa.Schema:
    """The table's columns as Arrow types (what writers hand pyiceberg)."""
    groups = group_types(view)
    fields = []
    for f in view.output_schema():
        kind = TIMESTAMP if pa.types.is_timestamp(f.type) else groups.get(f.name, f.type)
        fields.append(pa.field(f.name, kind))
    fields += [pa.field(SOURCE, pa.string()), pa.field(BATCH_VERSION, pa.int64())]
    fields += [pa.field(name, pa.binary()) for name in state_columns(view)]
    return pa.schema(fields)


def state_columns(view: View) -> list[str]:
    """The state column of each aggregation, for kinds whose table keeps states (null where
    none was built: realtime rows, and the types whose state Spark does not build)."""
    return kind_of(view).state_columns(view)


_TYPES: list[tuple] = [
    (pa.types.is_timestamp, TimestamptzType),
    (pa.types.is_string, StringType),
    (pa.types.is_large_string, StringType),
    (pa.types.is_boolean, BooleanType),
    (pa.types.is_integer, LongType),
    (pa.types.is_floating, DoubleType),
    (pa.types.is_binary, BinaryType),
    (pa.types.is_large_binary, BinaryType),
]


def _iceberg_type(kind: pa.DataType) -> IcebergType:
    for test, iceberg in _TYPES:
        if test(kind):
            return iceberg()
    raise TypeError(f"no Iceberg type for Arrow type {kind}")


def iceberg_schema(view: View) -> Schema:
    """:func:`arrow_schema` as an Iceberg schema (ids 1..n in column order)."""
    return Schema(
        *(
            NestedField(i, f.name, _iceberg_type(f.type), required=False)
            for i, f in enumerate(arrow_schema(view), start=1)
        )
    )


def table_rows(view: View, rows: pa.Table, source: str, version: int) -> pa.Table:
    """Rows in :func:`arrow_schema` order and types from a query-shaped or a batch-file table.

    Accepts times as epoch ms (batch files) or timestamps (queries); a missing end column
    (batch files of windowed views) is computed from the start and the interval. Grouping
    columns are cast from the segment files' strings to their declared types (a timestamp
    group from its epoch ms).
    """
    schema = arrow_schema(view)
    start, end = time_columns(view)
    columns = []
    for f in schema:
        if f.name == SOURCE:
            columns.append(pa.array([source] * rows.num_rows, pa.string()))
        elif f.name == BATCH_VERSION:
            columns.append(pa.array([version] * rows.num_rows, pa.int64()))
        elif f.name == end and end not in rows.column_names:
            starts = _as_ms(rows.column(start))
            ends = pc.add(starts, pa.scalar(view.interval_ms, pa.int64()))
            columns.append(_as_timestamp(ends))
        elif pa.types.is_timestamp(f.type):
            columns.append(_as_timestamp(_as_ms(rows.column(f.name))))
        elif f.name in rows.column_names:
            columns.append(rows.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _as_ms(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    return column.cast(pa.int64())


def _as_timestamp(ms: pa.ChunkedArray) -> pa.ChunkedArray:
    return ms.cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP)
