"""Roll-ups: a view's windows merged into coarser ones (hours into days) through their states.

Realtime segments hold partial states; a view's table holds each corrected window's state
beside its exact result (:func:`pipelines.batch.windows.batch_schema`). Merging the states of a
day's windows gives the day as a view with a one-day interval would: exactly for the
additive and exact types, within the sketch's bound for sketches (a corrected window's KLL
sketch is Spark's, so a rolled-up quantile is within KLL's rank error of the exact one).
Aggregations whose state Spark cannot build (``mode``, ``top_k``, ``frequent_items``) roll up
only where no window of the coarser one is corrected; elsewhere their value is null.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.kinds import kind_of
from pipelines.segments import state_column
from pipelines.serving.sources import SOURCE, check_prefer, segment_sources
from pipelines.serving.windows import merge_realtime
from pipelines.storage import ObjectStore
from pipelines.tables import Tables, read_rows
from pipelines.views.model import WINDOW_END, WINDOW_START, View, format_duration

__all__ = ["rollup_view", "window_states"]

DAY_MS = 86_400_000
_MISSING = object()
"""A window's state the correction did not build, told apart from a state that is None
(a min, a sum, ... over no value)."""


def window_states(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    prefer: str = "newest",
    *,
    tables: Tables,
    missing: Any = None,
) -> dict[tuple, tuple[str, list[Any]]]:
    """Per (window start, *groups) starting in ``[start_ms, end_ms)``: where it was served
    from and one state per aggregation (``missing`` where a correction holds no state for it).

    Corrected windows come from the view's table (their states are columns of it), the
    others from the stream's partial states of their segment."""
    check_prefer(prefer, None)
    out: dict[tuple, tuple[str, list[Any]]] = {}
    done: set[int] = set()
    if prefer != "realtime":
        corrected = _table_states(tables, view, start_ms, end_ms, missing)
        out.update(corrected)
        done = {view.segment_start(key[0]) for key in corrected}
    if prefer != "batch":
        for source in segment_sources(store, view, start_ms, end_ms):
            if source.segment_start_ms in done:
                continue
            for key, states in merge_realtime(view, source.tables()).items():
                out[key] = (source.label, states)
    return {k: v for k, v in out.items() if start_ms <= k[0] < end_ms}


def _table_states(
    tables: Tables, view: View, start_ms: int, end_ms: int, missing: Any = None
) -> dict[tuple, tuple[str, list[Any]]]:
    rows = read_rows(tables, view, start_ms, end_ms, batch_only=True, states=True)
    out: dict[tuple, tuple[str, list[Any]]] = {}
    names = [state_column(a.out) for a in view.aggregators]
    for row in rows.to_pylist():
        start = row[WINDOW_START]
        key = (
            int(start.timestamp() * 1000) if hasattr(start, "timestamp") else start,
            *(row[c] for c in view.grouping_cols),
        )
        states = [
            missing if row[name] is None else agg.deserialize(row[name])
            for name, agg in zip(names, view.aggregators, strict=True)
        ]
        out[key] = (row[SOURCE], states)
    return out


def rollup_view(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    granularity_ms: int,
    prefer: str = "newest",
    *,
    tables: Tables,
) -> pa.Table:
    """``view``'s windows merged into windows of ``granularity_ms`` (UTC-aligned) that
    overlap ``[start_ms, end_ms)``, each from all of its windows; the same columns as a
    query, ``source`` listing where the merged windows came from."""
    _check(view, granularity_ms)
    first = start_ms - start_ms % granularity_ms
    last = end_ms + (-end_ms % granularity_ms)
    merged: dict[tuple, tuple[set[str], list[Any]]] = {}
    aggs = view.aggregators
    for key, (label, states) in window_states(
        store, view, first, last, prefer, tables=tables, missing=_MISSING
    ).items():
        coarse = (key[0] - key[0] % granularity_ms, *key[1:])
        held = merged.get(coarse)
        if held is None:
            merged[coarse] = ({label}, list(states))
            continue
        labels, current = held
        labels.add(label)
        for j, agg in enumerate(aggs):
            a, b = current[j], states[j]
            current[j] = _MISSING if a is _MISSING or b is _MISSING else agg.merge(a, b)
    rows = []
    for (start, *groups), (labels, states) in sorted(merged.items(), key=_order):
        row: dict[str, Any] = {WINDOW_START: start, WINDOW_END: start + granularity_ms}
        row.update(zip(view.grouping_cols, groups, strict=True))
        for agg, state in zip(aggs, states, strict=True):
            if state is _MISSING:
                row.update(dict.fromkeys(f.name for f in agg.output_fields()))
            else:
                row.update(agg.result(state))
        row[SOURCE] = "+".join(sorted(labels))
        rows.append(row)
    schema = view.output_schema().append(pa.field(SOURCE, pa.string()))
    return pa.Table.from_pylist(rows, schema=schema)


def _order(item: tuple[tuple, Any]) -> tuple:
    key = item[0]
    return (key[0], *(str(k) for k in key[1:]))


def _check(view: View, granularity_ms: int) -> None:
    kind_of(view).check_rollup(view)
    if view.is_sliding:
        raise QueryError(
            f"{view.name} has sliding windows: they overlap, so merging them would count "
            "events several times (roll up a tumbling view)"
        )
    if granularity_ms < view.interval_ms or granularity_ms % view.interval_ms:
        raise QueryError(
            f"granularity {format_duration(granularity_ms)} must be a multiple of the view's "
            f"interval {format_duration(view.interval_ms)}"
        )
    if DAY_MS % granularity_ms and granularity_ms % DAY_MS:
        raise QueryError(
            f"granularity {format_duration(granularity_ms)} must divide a day or be whole days"
        )
