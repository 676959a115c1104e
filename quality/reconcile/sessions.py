"""Reconcile a session view's realtime sessions with its correction, start hour by start hour.

Sessions are compared by (session key, session start): sessions the correction has and the
stream lacks are *missing*, sessions only the stream has are *extra*, and matched sessions are
compared per metric (``event_count`` and every aggregation output) with their relative error.

Causes come from the archive: for each session, the deliveries of its key during its span
(from ``gap`` before its first event to ``gap`` after its last, extended back over the key's
activity without a pause of ``gap``, since a cause there shifts every maximum-duration cut
after it), how many of them repeated an
event id (duplicates: the stream counts them, the correction does not) and how many the stream
dropped as late (behind their partition's watermark by more than the allowed lateness).
Events are told apart by the topic's declared id; a topic without one has no duplicates (each
archived record is an event of its own, ordered by time, then partition and offset). A late
event the stream dropped can split a session in two or shorten it, and a duplicate can bridge
a gap, so a session that differs, is missing or is extra is *explained* when its span had a
duplicate or a late drop. The stream folds an event into its session only once the watermark
is ``allowed_lateness`` past it (its *settled frontier*, read from the tasks' checkpoints), so
a session that ends after the frontier may also be incomplete in realtime or absent from it:
that is explained too (*unsettled*). Anything else fails (up to ``unexplained_share`` of the
sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.events.declaration import EVENT_TIME
from pipelines.segments import (
    HOUR_MS,
    RangeRecord,
    hour_label,
    parse_checkpoint_key,
)
from pipelines.serving import corrected_segments
from pipelines.serving.sessions import query_sessions
from pipelines.storage import ObjectStore
from pipelines.stream.checkpoint import load_checkpoint
from pipelines.tables import Tables
from pipelines.views.model import EVENT_COUNT, SESSION_END, SESSION_START, View
from quality.causes import ArchiveReader, Causes, GroupCauses, id_column, read_hour_archive
from quality.compare import (
    EXACT,
    Tolerance,
    column_values,
    compare_tables,
    match_rows,
    metric_kinds,
    row_keys,
)
from quality.reconcile.metrics import (
    NO_CAUSES,
    SAMPLES,
    allowed_unexplained,
    close,
    counted_metric,
    other_metric,
    sample,
    within_tolerance,
)
from quality.reconcile.results import Reconciliation, TablesRead

__all__ = ["SessionCauses", "archive_rows", "reconcile_session_hour", "settled_frontier"]


class SessionCauses:
    """Per session key: its archived deliveries in time order, with running counts of the
    duplicate and late ones, so the causes of any span are two binary searches away.

    Columnar: the archive's rows sorted by key then time once; a span's counts are differences
    of cumulative sums."""

    def __init__(self, view: View, rows: pa.Table) -> None:
        assert view.session is not None
        self.view = view
        id_col = id_column([view])
        order = [EVENT_TIME, *([id_col] if id_col is not None else []), "partition", "offset"]
        ordered = rows.sort_by([(c, "ascending") for c in order])
        size = ordered.num_rows
        duplicate = np.zeros(size, dtype=bool)
        if id_col is not None:
            column = ordered.column(id_col)
            ids = _codes(column)[0]
            duplicate[:] = True
            duplicate[np.unique(ids, return_index=True)[1]] = False  # a repeat of an earlier id
            duplicate &= np.asarray(column.is_valid(), dtype=bool)  # a null id is no repeat
        times = ordered.column(EVENT_TIME).to_numpy().astype(np.int64)
        prior = ordered.column("prior_watermark").combine_chunks()
        late = np.asarray(prior.is_valid(), dtype=bool) & (
            times < prior.fill_null(0).to_numpy().astype(np.int64) - view.allowed_lateness_ms
        )
        keys, values = _codes(ordered.column(view.session.key))
        by_key = np.argsort(keys, kind="stable")  # each key's deliveries stay in time order
        keys, self.times = keys[by_key], times[by_key]
        new_key = np.ones(size, dtype=bool)
        new_key[1:] = keys[1:] != keys[:-1]
        firsts = np.flatnonzero(new_key)
        ends = np.append(firsts[1:], size) if size else firsts
        self.slices = {
            values[keys[first]]: (int(first), int(end))
            for first, end in zip(firsts, ends, strict=True)
        }
        """Per key, the positions of its deliveries."""
        new_run = new_key.copy()
        new_run[1:] |= np.diff(self.times) >= view.session.gap_ms
        self.run_start = np.maximum.accumulate(np.where(new_run, np.arange(size), 0))
        """Per delivery: the first of its key's run without a pause of ``gap`` (where a
        maximum-duration cut, shifted by a cause, starts to cascade)."""
        self.duplicates_before = np.append(0, np.cumsum(duplicate[by_key]))
        self.late_before = np.append(0, np.cumsum(late[by_key]))
        self.total = Causes(
            events=size, duplicates=int(duplicate.sum()), late_dropped=int(late.sum())
        )

    def of(self, key: Any, start_ms: int, end_ms: int) -> GroupCauses:
        """Deliveries, distinct events and late drops of ``key`` within the session's span,
        extended back to the start of the key's uninterrupted activity before it."""
        gap = self.view.session.gap_ms  # type: ignore[union-attr]
        found = self.slices.get(key)
        if found is None:
            return NO_CAUSES
        first, end = found
        times = self.times[first:end]
        lo = first + int(np.searchsorted(times, start_ms - gap, side="left"))
        hi = first + int(np.searchsorted(times, end_ms + gap, side="right"))
        if lo < end:
            lo = int(self.run_start[lo])
        deliveries = max(0, hi - lo)
        duplicates = int(self.duplicates_before[hi] - self.duplicates_before[lo])
        late = int(self.late_before[hi] - self.late_before[lo])
        return GroupCauses(deliveries, deliveries - duplicates, late)


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """Integer codes of ``column``'s values (null is a value too) and the values coded."""
    encoded = column.combine_chunks().dictionary_encode(null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary.to_pylist()


def settled_frontier(store: ObjectStore, view: View) -> int | None:
    """The earliest settled frontier (watermark - allowed lateness) of the view's tasks, from
    their newest checkpoints; None when no task has checkpointed."""
    frontiers = []
    partitions = {
        parsed[1]
        for key in store.list(f"checkpoints/{view.topic}/")
        if (parsed := parse_checkpoint_key(key)) is not None and parsed[0] == view.topic
    }
    for partition in sorted(partitions):
        checkpoint = load_checkpoint(store, view.topic, partition)
        if checkpoint is not None:
            frontiers.append(checkpoint.watermark - view.allowed_lateness_ms)
    return min(frontiers) if frontiers else None


def archive_rows(
    store: ObjectStore | ArchiveReader,
    view: View,
    hour_ms: int,
    ranges: Sequence[RangeRecord] | None,
) -> pa.Table:
    """Archived rows of the hours that sessions starting in ``hour_ms`` can span."""
    spec = view.session
    assert spec is not None
    id_col = id_column([view])
    first = hour_ms - (-(-spec.gap_ms // HOUR_MS)) * HOUR_MS
    last = hour_ms + HOUR_MS + spec.max_duration_ms + spec.gap_ms
    tables = []
    for hour in range(first, last, HOUR_MS):
        archive = read_hour_archive(store, view.topic, hour, [spec.key], ranges, id_col)
        rows = archive.rows
        if rows.num_rows:
            times = rows.column(EVENT_TIME).to_numpy()
            tables.append(rows.filter(pa.array((times >= hour) & (times < hour + HOUR_MS))))
    tables = [t.select(tables[0].schema.names) for t in tables]
    if not tables:
        strings = {spec.key, *([id_col] if id_col is not None else [])}
        names = [*strings, EVENT_TIME, "partition", "offset", "prior_watermark"]
        return pa.table(
            {n: pa.array([], pa.string() if n in strings else pa.int64()) for n in names}
        )
    return pa.concat_tables(tables, promote_options="permissive")  # nulls of older files


def _span_ms(table: pa.Table, column: str) -> np.ndarray:
    """``column`` (a time) in epoch ms, as integers."""
    values = table.column(column)
    if pa.types.is_timestamp(values.type):
        values = values.cast(pa.timestamp("ms", tz=values.type.tz), safe=False)
    return values.cast(pa.int64()).to_numpy().astype(np.int64)


class _Sessions:
    """One side's sessions, by position: key, span and whether realtime still had it open."""

    def __init__(self, table: pa.Table, key_col: str) -> None:
        self.keys = table.column(key_col).to_pylist()
        self.starts = _span_ms(table, SESSION_START)
        self.ends = _span_ms(table, SESSION_END)
        self.open = (
            np.asarray(table.column("open").fill_null(False).to_numpy(), dtype=bool)
            if "open" in table.column_names
            else np.zeros(table.num_rows, dtype=bool)
        )

    def causes(self, causes: SessionCauses, position: int) -> GroupCauses:
        return causes.of(self.keys[position], int(self.starts[position]), int(self.ends[position]))


def _differing(expected: pa.Array, actual: pa.Array) -> np.ndarray:
    """Positions of the aligned rows whose values are not :func:`close`."""
    if expected.type == actual.type and expected.null_count == 0 and actual.null_count == 0:
        if pa.types.is_integer(expected.type):  # exact, as close() compares integers
            e = expected.to_numpy(zero_copy_only=False)
            return np.flatnonzero(e != actual.to_numpy(zero_copy_only=False))
        if pa.types.is_floating(expected.type):
            e = expected.to_numpy(zero_copy_only=False).astype(np.float64)
            a = actual.to_numpy(zero_copy_only=False).astype(np.float64)
            return np.flatnonzero(~within_tolerance(e, a))
    pairs = zip(expected.to_pylist(), actual.to_pylist(), strict=True)
    return np.array([i for i, (e, a) in enumerate(pairs) if not close(e, a)], dtype=np.int64)


def reconcile_session_hour(
    store: ObjectStore,
    view: View,
    hour_ms: int,
    tolerance: Tolerance | None = None,
    reader: ArchiveReader | None = None,
    ranges: Sequence[RangeRecord] | None = None,
    *,
    has_correction: bool | None = None,
    on_tables: TablesRead | None = None,
    corrected: pa.Table | None = None,
    tables: Tables,
) -> Reconciliation:
    """Reconcile the sessions of ``view`` that started in the hour ``hour_ms``; the causes
    are those of every hour read (the sessions' spans).

    Column by column: only the sessions that are missing, extra or differ are looked up in
    the archive's causes (a session whose values agree needs no cause). ``has_correction``:
    whether the hour has a correction, and ``corrected`` its sessions, if the caller knows."""
    tolerance = tolerance or Tolerance.from_env()
    assert view.session is not None
    key_col = view.session.key
    if has_correction is None:
        has_correction = hour_ms in corrected_segments(tables, view, [hour_ms])
    if not has_correction:
        return Reconciliation(view.name, hour_ms, False, None, Causes())
    causes = SessionCauses(view, archive_rows(reader or store, view, hour_ms, ranges))
    end = hour_ms + HOUR_MS
    if corrected is None:
        corrected = query_sessions(store, view, hour_ms, end, prefer="batch", tables=tables)
    realtime = query_sessions(store, view, hour_ms, end, prefer="realtime", tables=tables)
    if on_tables is not None:
        on_tables(view, hour_ms, corrected, realtime)
    keys = [key_col, SESSION_START]
    kinds = {EVENT_COUNT: EXACT, **metric_kinds(view)}
    aggregation = {f.name: a.name for a in view.aggregators for f in a.output_fields()}
    aggregation[EVENT_COUNT] = "count"
    match = match_rows(corrected, realtime, keys)
    comparison = compare_tables(corrected, realtime, keys, kinds, tolerance, match)
    want, got = _Sessions(corrected, key_col), _Sessions(realtime, key_col)
    frontier = settled_frontier(store, view)

    def explained(sessions: _Sessions, position: int, still_open: bool) -> bool:
        """Duplicates or late drops in the session's span, or the session not settled."""
        if sessions.causes(causes, position).explains_difference:
            return True
        unsettled = frontier is not None and int(sessions.ends[position]) >= frontier
        return unsettled or still_open

    missing_explained = sum(explained(want, int(i), False) for i in match.missing_index)
    extra_explained = sum(explained(got, int(i), bool(got.open[i])) for i in match.extra_index)
    unexplained_groups = (
        len(comparison.missing) - missing_explained + len(comparison.extra) - extra_explained
    )
    rule = (
        "differences only in sessions whose span had duplicates or late drops, "
        "or not settled in realtime"
    )
    metrics = []
    for column, kind in kinds.items():
        if kind != EXACT:
            metrics.append(other_metric(column, kind, aggregation[column], comparison))
            continue
        expected = column_values(corrected, column, match.expected_index)
        actual = column_values(realtime, column, match.actual_index)
        differing = _differing(expected, actual)
        beyond = []
        for row in differing:
            at, where = int(match.expected_index[row]), int(match.actual_index[row])
            if not explained(want, at, bool(got.open[where])):
                beyond.append(int(row))
        first = beyond[:SAMPLES]
        shown = match.expected_index[first]
        samples = [
            sample(key, expected[row].as_py(), actual[row].as_py(), want.causes(causes, at))
            for key, row, at in zip(
                row_keys(corrected, keys, shown), first, shown.tolist(), strict=True
            )
        ]
        metrics.append(
            counted_metric(
                column,
                kind,
                aggregation[column],
                compared=match.matched,
                differing=len(differing),
                unexplained=len(beyond),
                samples=samples,
                allowed=allowed_unexplained(tolerance.unexplained_share, match.matched),
                rule=rule,
            )
        )
    label = f"{view.name} {hour_label(hour_ms)}"
    failures = []
    if unexplained_groups > allowed_unexplained(
        tolerance.unexplained_share, max(1, match.expected_rows)
    ):
        failures.append(
            f"{label}: {unexplained_groups} session(s) missing or extra without duplicates or "
            f"late drops to explain them ({len(comparison.missing)} missing from realtime, "
            f"{len(comparison.extra)} only in realtime)"
        )
    failures += [
        f"{label}: {m.column}: {m.unexplained} of {m.compared} sessions break '{m.rule}'"
        for m in metrics
        if not m.passed
    ]
    return Reconciliation(
        view=view.name,
        hour_ms=hour_ms,
        corrected=True,
        comparison=comparison,
        causes=causes.total,
        metrics=metrics,
        groups_missing_explained=missing_explained + extra_explained,
        groups_unexplained=unexplained_groups,
        failures=failures,
    )
