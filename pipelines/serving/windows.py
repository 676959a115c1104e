"""Serve a windowed view: final values per window and group, from the view's table.

The table holds batch rows of corrected hours and the realtime rows the publisher committed
(:mod:`.publisher`), as of the newest snapshot or an earlier one. ``prefer="realtime"`` merges
the stream's partial states of every task with the view's aggregators instead (the
reconciliation compares them with the batch). :func:`pipelines.serving.query.query_view`
answers for every kind of view.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.segments import state_column, written_for
from pipelines.serving.sources import SOURCE, check_prefer, require_table, segment_sources
from pipelines.storage import ObjectStore
from pipelines.tables import AsOf, Tables, read_rows
from pipelines.views.model import WINDOW_END, WINDOW_START, View

__all__ = ["merge_realtime", "query_windows", "realtime_rows", "realtime_windows_table"]

log = logging.getLogger(__name__)


def merge_realtime(view: View, tables: Iterable[pa.Table]) -> dict[tuple, list[Any]]:
    """Merge the partial states of every task into one state per (window, group)."""
    merged: dict[tuple, list[Any]] = {}
    aggs = view.aggregators
    for table in tables:
        if not written_for(table.schema, view.fingerprint):
            log.warning(
                "skipping a realtime segment of %s written for another definition", view.name
            )
            continue
        columns = [WINDOW_START, *view.grouping_cols]
        keys = zip(*(table.column(c).to_pylist() for c in columns), strict=True)
        blobs = [table.column(state_column(a.out)).to_pylist() for a in aggs]
        for row, key in enumerate(keys):
            states = [agg.deserialize(blobs[j][row]) for j, agg in enumerate(aggs)]
            current = merged.get(key)
            if current is None:
                merged[key] = states
            else:
                merged[key] = [
                    agg.merge(a, b) for agg, a, b in zip(aggs, current, states, strict=True)
                ]
    return merged


def realtime_rows(view: View, tables: Iterable[pa.Table]) -> list[dict[str, Any]]:
    """Final values of every (window, group) of a windowed view's partial-state files."""
    rows = []
    for key, states in merge_realtime(view, tables).items():
        row = {WINDOW_START: key[0]}
        row.update(zip(view.grouping_cols, key[1:], strict=True))
        for agg, state in zip(view.aggregators, states, strict=True):
            row.update(agg.result(state))
        rows.append(row)
    return rows


def realtime_windows_table(
    view: View, segments: Iterable[Iterable[pa.Table]], schema: pa.Schema
) -> pa.Table:
    """The final rows of a windowed view's realtime files (per segment, its files)."""
    rows = [row for files in segments for row in realtime_rows(view, files)]
    return pa.Table.from_pylist(rows, schema=schema)


def query_windows(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    prefer: str = "newest",
    *,
    tables: Tables,
    as_of: AsOf | None = None,
) -> pa.Table:
    """Windows starting in ``[start_ms, end_ms)``, sorted by window and group.

    ``prefer="realtime"`` ignores corrections (to compare), ``"batch"`` serves only them;
    ``as_of`` reads an earlier snapshot of the view's table.
    """
    if end_ms <= start_ms:
        raise QueryError(f"empty range: end {end_ms} is not after start {start_ms}")
    check_prefer(prefer, as_of)
    if prefer != "realtime":
        if prefer == "newest":  # batch: no table = no correction
            require_table(store, tables, view)
        found = read_rows(tables, view, start_ms, end_ms, batch_only=prefer == "batch", as_of=as_of)
        keys = [WINDOW_START, *view.grouping_cols]
        return found.sort_by([(k, "ascending") for k in keys]) if found.num_rows else found
    schema = view.output_schema().append(pa.field(SOURCE, pa.string()))
    rows: list[dict[str, Any]] = []
    for source in segment_sources(store, view, start_ms, end_ms):
        for row in realtime_rows(view, source.tables()):
            row[SOURCE] = source.label
            rows.append(row)
    rows = [r for r in rows if start_ms <= r[WINDOW_START] < end_ms]
    for row in rows:
        row[WINDOW_END] = row[WINDOW_START] + view.interval_ms
    rows.sort(key=lambda r: (r[WINDOW_START], *(str(r[c]) for c in view.grouping_cols)))
    return pa.Table.from_pylist(rows, schema=schema)
