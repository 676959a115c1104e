"""Reconcile a session view's realtime sessions with its correction, start hour by start hour.

Sessions are compared by (session key, session start): sessions the correction has and the
stream lacks are *missing*, sessions only the stream has are *extra*, and matched sessions are
compared per metric (``event_count`` and every aggregation output) with their relative error.

Causes come from the archive: for each session, the deliveries of its key during its span
(from ``gap`` before its first event to ``gap`` after its last, extended back over the key's
activity without a pause of ``gap``, since a cause there shifts every maximum-duration cut
after it), how many of them repeated an
event id (duplicates: the stream counts them, the correction does not) and how many the stream
dropped as late (behind their partition's watermark by more than the allowed lateness). A late
event the stream dropped can split a session in two or shorten it, and a duplicate can bridge
a gap, so a session that differs, is missing or is extra is *explained* when its span had a
duplicate or a late drop. The stream folds an event into its session only once the watermark
is ``allowed_lateness`` past it (its *settled frontier*, read from the tasks' checkpoints), so
a session that ends after the frontier may also be incomplete in realtime or absent from it:
that is explained too (*unsettled*). Anything else fails (up to ``unexplained_share`` of the
sessions).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

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
from pipelines.views.model import EVENT_COUNT, SESSION_END, SESSION_START, View
from quality.causes import ArchiveReader, Causes, GroupCauses, read_hour_archive
from quality.compare import EXACT, Tolerance, compare_tables, metric_kinds, rows_by_key
from quality.reconcile.metrics import (
    NO_CAUSES,
    allowed_unexplained,
    close,
    exact_metric,
    other_metric,
)
from quality.reconcile.results import Reconciliation

__all__ = ["SessionCauses", "archive_rows", "reconcile_session_hour", "settled_frontier"]


class SessionCauses:
    """Per session key: its archived deliveries in time order, each with duplicate and late
    flags, so the causes of any span are two binary searches away."""

    def __init__(self, view: View, rows: pa.Table) -> None:
        assert view.session is not None
        self.view = view
        key_col = view.session.key
        lateness = view.allowed_lateness_ms
        seen: set[str] = set()
        events: dict[str, list[tuple[int, bool, bool]]] = defaultdict(list)
        ordered = rows.sort_by(
            [("event_time", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
        ).to_pylist()
        for row in ordered:
            duplicate = row["event_id"] in seen
            seen.add(row["event_id"])
            prior = row["prior_watermark"]
            late = prior is not None and row["event_time"] < prior - lateness
            events[row[key_col]].append((row["event_time"], duplicate, late))
        self.times = {k: [e[0] for e in v] for k, v in events.items()}
        self.flags = {k: [(e[1], e[2]) for e in v] for k, v in events.items()}
        gap = view.session.gap_ms
        self.run_start: dict[str, list[int]] = {}
        """Per key and event: the index of the first event of its run without a pause of
        ``gap`` (where a maximum-duration cut, shifted by a cause, starts to cascade)."""
        for key, times in self.times.items():
            starts, first = [], 0
            for i, t in enumerate(times):
                if i and t - times[i - 1] >= gap:
                    first = i
                starts.append(first)
            self.run_start[key] = starts
        self.total = Causes(
            events=len(ordered),
            duplicates=sum(d for v in self.flags.values() for d, _ in v),
            late_dropped=sum(late for v in self.flags.values() for _, late in v),
        )

    def of(self, key: str, start_ms: int, end_ms: int) -> GroupCauses:
        """Deliveries, distinct events and late drops of ``key`` within the session's span,
        extended back to the start of the key's uninterrupted activity before it."""
        gap = self.view.session.gap_ms  # type: ignore[union-attr]
        times = self.times.get(key)
        if not times:
            return NO_CAUSES
        lo = bisect.bisect_left(times, start_ms - gap)
        hi = bisect.bisect_right(times, end_ms + gap)
        if lo < len(times):
            lo = self.run_start[key][lo]
        flags = self.flags[key][lo:hi]
        duplicates = sum(d for d, _ in flags)
        return GroupCauses(len(flags), len(flags) - duplicates, sum(late for _, late in flags))


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


def _ms(value: datetime | int) -> int:
    return value if isinstance(value, int) else int(value.timestamp() * 1000)


def archive_rows(
    store: ObjectStore | ArchiveReader,
    view: View,
    hour_ms: int,
    ranges: Sequence[RangeRecord] | None,
) -> pa.Table:
    """Archived rows of the hours that sessions starting in ``hour_ms`` can span."""
    spec = view.session
    assert spec is not None
    first = hour_ms - (-(-spec.gap_ms // HOUR_MS)) * HOUR_MS
    last = hour_ms + HOUR_MS + spec.max_duration_ms + spec.gap_ms
    tables = []
    for hour in range(first, last, HOUR_MS):
        archive = read_hour_archive(store, view.topic, hour, [spec.key], ranges)
        rows = archive.rows
        if rows.num_rows:
            times = rows.column("event_time").to_numpy()
            tables.append(rows.filter(pa.array((times >= hour) & (times < hour + HOUR_MS))))
    tables = [t.select(tables[0].schema.names) for t in tables]
    if not tables:
        names = ["event_id", "event_time", "partition", "offset", "prior_watermark", spec.key]
        return pa.table(
            {
                n: pa.array([], pa.string() if n in ("event_id", spec.key) else pa.int64())
                for n in names
            }
        )
    return pa.concat_tables(tables)


def reconcile_session_hour(
    store: ObjectStore,
    view: View,
    hour_ms: int,
    tolerance: Tolerance | None = None,
    reader: ArchiveReader | None = None,
    ranges: Sequence[RangeRecord] | None = None,
) -> Reconciliation:
    """Reconcile the sessions of ``view`` that started in the hour ``hour_ms``; the causes
    are those of every hour read (the sessions' spans)."""
    tolerance = tolerance or Tolerance.from_env()
    assert view.session is not None
    key_col = view.session.key
    if hour_ms not in corrected_segments(store, view, [hour_ms]):
        return Reconciliation(view.name, hour_ms, False, None, Causes())
    causes = SessionCauses(view, archive_rows(reader or store, view, hour_ms, ranges))
    end = hour_ms + HOUR_MS
    corrected = query_sessions(store, view, hour_ms, end, prefer="batch")
    realtime = query_sessions(store, view, hour_ms, end, prefer="realtime")
    keys = [key_col, SESSION_START]
    kinds = {EVENT_COUNT: EXACT, **metric_kinds(view)}
    aggregation = {f.name: a.name for a in view.aggregators for f in a.output_fields()}
    aggregation[EVENT_COUNT] = "count"
    comparison = compare_tables(corrected, realtime, keys, kinds, tolerance)
    want, got = rows_by_key(corrected, keys), rows_by_key(realtime, keys)

    frontier = settled_frontier(store, view)

    def explained(key: tuple) -> bool:
        """Duplicates or late drops in the session's span, or the session not settled."""
        row = want.get(key) or got[key]
        if causes.of(
            row[key_col], _ms(row[SESSION_START]), _ms(row[SESSION_END])
        ).explains_difference:
            return True
        return (frontier is not None and _ms(row[SESSION_END]) >= frontier) or (
            key in got and got[key]["open"]
        )

    def causes_of(key: tuple) -> GroupCauses:
        row = want[key]
        return causes.of(row[key_col], _ms(row[SESSION_START]), _ms(row[SESSION_END]))

    def judge(key: tuple, expected: object, actual: object, _why: GroupCauses) -> bool:
        return close(expected, actual) or explained(key)

    missing_explained = sum(explained(k) for k in comparison.missing)
    extra_explained = sum(explained(k) for k in comparison.extra)
    unexplained_groups = (
        len(comparison.missing) - missing_explained + len(comparison.extra) - extra_explained
    )
    matched = [k for k in want if k in got]
    rule = (
        "differences only in sessions whose span had duplicates or late drops, "
        "or not settled in realtime"
    )
    metrics = []
    for column, kind in kinds.items():
        if kind != EXACT:
            metrics.append(other_metric(column, kind, aggregation[column], comparison))
            continue
        pairs = [(k, want[k].get(column), got[k].get(column)) for k in matched]
        metrics.append(
            exact_metric(
                column, kind, aggregation[column], pairs, causes_of, judge, rule, tolerance
            )
        )
    label = f"{view.name} {hour_label(hour_ms)}"
    failures = []
    if unexplained_groups > allowed_unexplained(tolerance.unexplained_share, max(1, len(want))):
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
