"""Serve a session view: sessions that started, or were active, in a time range.

A session lives in the segment of the hour it started in. As for windowed views, sessions are
read from the view's table; ``prefer="realtime"`` reads every task's snapshot of each segment
instead, and rows of one (key, start) from several tasks (a key spread over partitions) are
merged with the view's aggregators.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.exceptions import QueryError
from pipelines.segments import state_column, written_for
from pipelines.serving.sources import SOURCE, check_prefer, require_table, segment_sources
from pipelines.storage import ObjectStore
from pipelines.tables import AsOf, Tables, read_rows
from pipelines.views.model import (
    EVENT_COUNT,
    KEPT_DROPPED,
    KEPT_EVENTS,
    OPEN,
    SESSION_END,
    SESSION_START,
    View,
)

__all__ = [
    "ACTIVE",
    "STARTED",
    "merge_realtime_sessions",
    "query_sessions",
    "realtime_session_rows",
    "realtime_sessions_table",
]

log = logging.getLogger(__name__)

STARTED = "started"
ACTIVE = "active"


def merge_realtime_sessions(view: View, tables: Iterable[pa.Table]) -> dict[tuple, dict]:
    """(key, start) -> the session's merged row (its ``states``, one per aggregator; its
    kept events as the file's JSON, or a list once merged).

    Each file is read a column at a time and its states deserialized a column at a time
    (:meth:`Aggregator.deserialize_many`): a day holds over a hundred thousand sessions."""
    assert view.session is not None
    key_col = view.session.key
    aggs = view.aggregators
    merged: dict[tuple, dict[str, Any]] = {}
    for table in tables:
        if not written_for(table.schema, view.fingerprint):
            log.warning(
                "skipping a realtime segment of %s written for another definition", view.name
            )
            continue
        names = table.column_names
        columns = [table.column(name).to_pylist() for name in names]
        states = [
            agg.deserialize_many(table.column(state_column(agg.out)).to_pylist()) for agg in aggs
        ]
        at = {name: i for i, name in enumerate(names)}
        keys = zip(columns[at[key_col]], columns[at[SESSION_START]], strict=True)
        for i, key in enumerate(keys):
            row = {name: column[i] for name, column in zip(names, columns, strict=True)}
            row_states = [column[i] for column in states]
            current = merged.get(key)
            if current is None:
                row["states"] = row_states  # its kept events stay JSON unless merged
                merged[key] = row
                continue
            current["states"] = [
                agg.merge(a, b)
                for agg, a, b in zip(aggs, current["states"], row_states, strict=True)
            ]
            current[SESSION_END] = max(current[SESSION_END], row[SESSION_END])
            current[EVENT_COUNT] += row[EVENT_COUNT]
            current[OPEN] = current[OPEN] or row[OPEN]
            kept = sorted(
                _kept(current[KEPT_EVENTS]) + orjson.loads(row[KEPT_EVENTS]),
                key=lambda e: e["event_time"],
            )
            cap = view.session.max_kept_events
            current[KEPT_DROPPED] += row[KEPT_DROPPED] + max(0, len(kept) - cap)
            current[KEPT_EVENTS] = kept[:cap]
    return merged


def _kept(events: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return orjson.loads(events) if isinstance(events, str) else events


def realtime_sessions_table(view: View, tables: Iterable[pa.Table]) -> pa.Table:
    """Final rows of every session in a session view's realtime files, as a table with the
    bounds in epoch ms (the session fields of the segment files, then the metrics).

    A column at a time: a session is in one task's file unless its key spread over
    partitions, so with no (key, start) twice, each metric column is its states' results and
    every other column is the files' own. Files whose rows must merge take the row path
    (:func:`realtime_session_rows`), which gives the same rows."""
    assert view.session is not None
    schema = pa.schema(
        view.session_fields(pa.int64()) + [f for a in view.aggregators for f in a.output_fields()]
    )
    tables = list(tables)
    usable = [t for t in tables if written_for(t.schema, view.fingerprint)]
    if len(usable) != len(tables):
        log.warning("skipping a realtime segment of %s written for another definition", view.name)
    if not usable:
        return schema.empty_table()
    try:
        table = pa.concat_tables(usable)
    except pa.ArrowInvalid:  # files of one definition hold the same columns; else row by row
        return pa.Table.from_pylist(realtime_session_rows(view, usable), schema=schema)
    key, start = (table.column(c).to_pylist() for c in (view.session.key, SESSION_START))
    keys = zip(key, start, strict=True)
    if len(set(keys)) != table.num_rows:  # a key spread over tasks: its rows merge
        return pa.Table.from_pylist(realtime_session_rows(view, usable), schema=schema)
    columns = {f.name: table.column(f.name).cast(f.type) for f in view.session_fields(pa.int64())}
    for agg in view.aggregators:
        states = agg.deserialize_many(table.column(state_column(agg.out)).to_pylist())
        results = [agg.result(state) for state in states]
        for f in agg.output_fields():
            columns[f.name] = pa.array([r[f.name] for r in results], type=f.type)
    return pa.table([columns[f.name] for f in schema], schema=schema)


def realtime_session_rows(view: View, tables: Iterable[pa.Table]) -> list[dict[str, Any]]:
    """Final rows of every session in a session view's realtime files."""
    rows = []
    for row in merge_realtime_sessions(view, tables).values():
        for agg, state in zip(view.aggregators, row.pop("states"), strict=True):
            row.update(agg.result(state))
        if not isinstance(row[KEPT_EVENTS], str):  # merged from several tasks' rows
            row[KEPT_EVENTS] = orjson.dumps(row[KEPT_EVENTS]).decode()
        rows.append(row)
    return rows


def query_sessions(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    prefer: str = "newest",
    *,
    tables: Tables,
    match: str = STARTED,
    as_of: AsOf | None = None,
) -> pa.Table:
    """Sessions that ``started`` in ``[start_ms, end_ms)``, or were ``active`` in it (started
    before its end and had an event at or after its start), sorted by start and key."""
    if view.session is None:
        raise QueryError(f"view {view.name} is not a session view")
    if end_ms <= start_ms:
        raise QueryError(f"empty range: end {end_ms} is not after start {start_ms}")
    if match not in (STARTED, ACTIVE):
        raise QueryError(f"match must be {STARTED} or {ACTIVE}, got {match!r}")
    first = start_ms - view.session.max_duration_ms if match == ACTIVE else start_ms
    check_prefer(prefer, as_of)
    if prefer != "realtime":
        if prefer == "newest":  # batch: no table = no correction
            require_table(store, tables, view)
        found = read_rows(tables, view, first, end_ms, batch_only=prefer == "batch", as_of=as_of)
        return _table_sessions(view, found, start_ms, end_ms, match)
    realtime: list[pa.Table] = []
    for source in segment_sources(store, view, first, end_ms):
        found = realtime_sessions_table(view, source.tables())
        realtime.append(found.append_column(SOURCE, pa.repeat(source.label, found.num_rows)))
    return _realtime_answer(view, realtime, start_ms, end_ms, match)


def _table_sessions(
    view: View, found: pa.Table, start_ms: int, end_ms: int, match: str
) -> pa.Table:
    """:func:`query_sessions`' answer from a table's rows, in Arrow (a day's sessions are
    tens of thousands of rows): bounds in epoch ms, the range's sessions, sorted, the view's
    output columns."""
    assert view.session is not None
    schema = view.output_schema().append(pa.field(SOURCE, pa.string()))
    columns = {}
    for field in schema:
        if field.name not in found.column_names:
            columns[field.name] = pa.nulls(found.num_rows, field.type)
            continue
        column = found.column(field.name)
        if field.name in (SESSION_START, SESSION_END):
            column = _ms_column(column)  # as the segments hold them, then the view's type
        columns[field.name] = column.cast(field.type)
    table = pa.table(columns, schema=schema)
    starts, ends = (_ms_column(table.column(c)) for c in (SESSION_START, SESSION_END))
    return _in_range(view, table, starts, ends, start_ms, end_ms, match)


def _realtime_answer(
    view: View, tables: list[pa.Table], start_ms: int, end_ms: int, match: str
) -> pa.Table:
    """:func:`query_sessions`' answer from realtime sessions alone (tables of
    :func:`realtime_sessions_table` with their source): as the row path filters and sorts
    them (a stable sort by start and key), in Arrow."""
    assert view.session is not None
    schema = view.output_schema().append(pa.field(SOURCE, pa.string()))
    if not tables:
        return schema.empty_table()
    table = pa.concat_tables(tables)
    starts, ends = table.column(SESSION_START), table.column(SESSION_END)
    table = _in_range(view, table, starts, ends, start_ms, end_ms, match)
    return pa.table([table.column(f.name).cast(f.type) for f in schema], schema=schema)


def _in_range(
    view: View,
    table: pa.Table,
    starts: pa.ChunkedArray,
    ends: pa.ChunkedArray,
    start_ms: int,
    end_ms: int,
    match: str,
) -> pa.Table:
    """The rows of sessions that ``match`` ``[start_ms, end_ms)`` (``starts`` and ``ends``:
    their bounds in epoch ms), sorted by start and key (a stable sort)."""
    assert view.session is not None
    if match == STARTED:
        in_range = pc.and_(pc.greater_equal(starts, start_ms), pc.less(starts, end_ms))
    else:
        in_range = pc.and_(pc.less(starts, end_ms), pc.greater_equal(ends, start_ms))
    table = table.filter(in_range)
    return table.sort_by([(SESSION_START, "ascending"), (view.session.key, "ascending")])


def _ms_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms", tz=column.type.tz), safe=False)
    return column.cast(pa.int64())
