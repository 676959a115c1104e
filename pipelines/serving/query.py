"""Serve a view: final values per window and group, from the newest version of each segment.

A store whose root publishes to Iceberg tables (:func:`pipelines.tables.tables_for`) is
served from the view's table: batch rows of corrected hours, realtime rows the publisher
committed (:mod:`.publisher`), as of the newest snapshot or an earlier one. ``prefer="realtime"``
still merges the stream's partial states (the reconciliation compares them with the batch).

A store without tables (the older layout): as in Druid, a published batch correction
overshadows the realtime partials of its segment as a whole (:mod:`.sources`); segments without
one are served from the realtime partials of every task, merged with the view's aggregators.
Session views are served by :mod:`.sessions`; :func:`query_view` answers for every kind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.kinds import kind_of
from pipelines.segments import read_parquet, state_column, written_for
from pipelines.serving.sources import SOURCE, require_table, segment_sources, table_source
from pipelines.storage import ObjectStore
from pipelines.tables import AsOf, read_rows
from pipelines.views.model import WINDOW_END, WINDOW_START, View

__all__ = ["merge_realtime", "query_view", "query_windows", "realtime_rows"]

log = logging.getLogger(__name__)


def _read(store: ObjectStore, key: str) -> pa.Table:
    return read_parquet(store.get(key))


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


def query_view(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    prefer: str = "newest",
    *,
    as_of: AsOf | None = None,
) -> pa.Table:
    """The view's rows starting in ``[start_ms, end_ms)``, as its kind reads them
    (:meth:`pipelines.kinds.ViewKind.query`): windows sorted by window and group
    (:func:`query_windows`), or sessions starting in it
    (:func:`pipelines.serving.sessions.query_sessions`).

    ``prefer="realtime"`` ignores corrections (to compare), ``"batch"`` serves only them;
    ``as_of`` reads an earlier snapshot of the view's table.
    """
    return kind_of(view).query(store, view, start_ms, end_ms, prefer, as_of=as_of)


def query_windows(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    prefer: str = "newest",
    *,
    as_of: AsOf | None = None,
) -> pa.Table:
    """A windowed view's windows starting in ``[start_ms, end_ms)``, sorted by window and
    group (see :func:`query_view`)."""
    if end_ms <= start_ms:
        raise QueryError(f"empty range: end {end_ms} is not after start {start_ms}")
    schema = view.output_schema().append(pa.field(SOURCE, pa.string()))
    tables = table_source(store, prefer, as_of)
    if tables is not None:
        if prefer == "newest":  # batch: no table = no correction
            require_table(store, tables, view)
        found = read_rows(tables, view, start_ms, end_ms, batch_only=prefer == "batch", as_of=as_of)
        keys = [WINDOW_START, *view.grouping_cols]
        return found.sort_by([(k, "ascending") for k in keys]) if found.num_rows else found
    rows: list[dict[str, Any]] = []
    for source in segment_sources(store, view, start_ms, end_ms, prefer):
        if source.kind == "batch":
            for key in source.files:
                for row in _read(store, key).to_pylist():
                    row[SOURCE] = source.label
                    rows.append(row)
            continue
        for row in realtime_rows(view, (_read(store, key) for key in source.files)):
            row[SOURCE] = source.label
            rows.append(row)
    rows = [r for r in rows if start_ms <= r[WINDOW_START] < end_ms]
    for row in rows:
        row[WINDOW_END] = row[WINDOW_START] + view.interval_ms
    rows.sort(key=lambda r: (r[WINDOW_START], *(str(r[c]) for c in view.grouping_cols)))
    return pa.Table.from_pylist(rows, schema=schema)
