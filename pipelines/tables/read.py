"""Reading a view's table: a time range of rows as of the newest or an earlier snapshot.

Rows come back in the shape :func:`pipelines.serving.query_view` answers in (the view's output
columns with millisecond timestamps, then ``source``: ``realtime`` or ``batch v<N>``), as the
CLI, the reconciliation and the report expect.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from pipelines.exceptions import QueryError
from pipelines.tables.protocol import Tables
from pipelines.tables.schema import (
    BATCH,
    BATCH_VERSION,
    SOURCE,
    iso_time,
    partition_field,
    state_columns,
)
from pipelines.views.model import View

__all__ = ["AsOf", "read_rows", "resolve_snapshot"]


@dataclass(frozen=True)
class AsOf:
    """An earlier state of the tables: a snapshot id, or the newest snapshot at a time."""

    snapshot_id: int | None = None
    time_ms: int | None = None


def resolve_snapshot(table: Table, as_of: AsOf | None) -> Snapshot | None:
    """The snapshot to read (None: the table has none at that point)."""
    if as_of is None or (as_of.snapshot_id is None and as_of.time_ms is None):
        return table.current_snapshot()
    if as_of.snapshot_id is not None:
        snapshot = table.snapshot_by_id(as_of.snapshot_id)
        if snapshot is None:
            known = ", ".join(str(s.snapshot_id) for s in table.snapshots()[-5:]) or "none"
            raise QueryError(
                f"{table.name()[-1]} has no snapshot {as_of.snapshot_id} (expired, or of another "
                f"table); the newest: {known}"
            )
        return snapshot
    return table.snapshot_as_of_timestamp(as_of.time_ms)


def read_rows(
    tables: Tables,
    view: View,
    start_ms: int,
    end_ms: int,
    *,
    batch_only: bool = False,
    as_of: AsOf | None = None,
    states: bool = False,
) -> pa.Table:
    """Rows whose window (session) starts in ``[start_ms, end_ms)``, unsorted; with ``states``
    also each aggregation's state column (roll-ups)."""
    out_schema = view.output_schema().append(pa.field(SOURCE, pa.string()))
    if states:
        for name in state_columns(view):
            out_schema = out_schema.append(pa.field(name, pa.binary()))
    table = tables.find(view.name)
    snapshot = None if table is None else resolve_snapshot(table, as_of)
    if table is None or snapshot is None:
        return out_schema.empty_table()
    col = partition_field(view)
    row_filter = And(GreaterThanOrEqual(col, iso_time(start_ms)), LessThan(col, iso_time(end_ms)))
    if batch_only:
        row_filter = And(row_filter, EqualTo(SOURCE, BATCH))
    rows = table.scan(row_filter=row_filter, snapshot_id=snapshot.snapshot_id).to_arrow()
    labels = pc.if_else(
        pc.equal(rows.column(SOURCE), BATCH),
        pc.binary_join_element_wise("batch v", rows.column(BATCH_VERSION).cast(pa.string()), ""),
        rows.column(SOURCE),
    )
    columns = []
    for f in out_schema:
        if f.name == SOURCE:
            columns.append(labels)
        elif f.name in rows.column_names:
            columns.append(rows.column(f.name).cast(f.type))
        else:  # a column the table gained after this snapshot
            columns.append(pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=out_schema)
