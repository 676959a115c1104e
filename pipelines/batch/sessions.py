"""The batch correction of session views: exact sessions from the archive, as batch versions.

Like windowed views (:mod:`pipelines.batch.correct`), a session view is corrected per segment
(the hour its sessions started in) from the deduplicated archive, late events included, with
the aggregator registry's Spark expressions; each segment's sessions are published as the
next batch version, which overshadows the realtime snapshots of that hour.

Sessions cross hour boundaries, so a segment needs events outside its hour:

- **after** it: a session that starts in the hour can last ``max_duration``, so the hours up
  to ``max_duration`` after the range are read too (their sessions are not published);
- **before** it: whether an event starts a session depends on the key's earlier events. An
  event after a silence of at least ``gap`` always starts one, so the correction reads a
  lookback of ``max_duration + gap`` (whole hours) before the range and cuts each key's events
  from the first one it reads. A key that is active without any pause of ``gap`` all through
  the lookback may be cut differently from the stream (which saw its whole history); the
  reconciliation reports such sessions as missing or extra.

Per key, events are ordered by (event time, id), or (event time, partition, offset) for a topic
without an id (the stream orders ties by offset, which only changes which of two simultaneous
events is kept first). Corrected sessions are final:
``open`` is false, so correct an hour only once the stream has passed it by ``max_duration``
and the allowed lateness.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import orjson
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipelines.batch.archive import (
    COPIES,
    HOUR,
    list_hour_files,
    order_columns,
    read_hours,
    topic_files,
)
from pipelines.batch.derived import with_derived
from pipelines.batch.frames import join_on_keys, spark_frame_of
from pipelines.batch.publish import CorrectionResult, SegmentRows, TableTarget, publish_versions
from pipelines.segments import HOUR_MS, hour_label, segment_schema
from pipelines.storage import ObjectStore
from pipelines.views.model import (
    EVENT_COUNT,
    KEPT_DROPPED,
    KEPT_EVENTS,
    OPEN,
    SESSION_END,
    SESSION_START,
    View,
)
from pipelines.views.topics import declaration_of

__all__ = [
    "correct_session_hours",
    "session_batch_schema",
    "session_hours",
    "session_runs",
    "sessionize",
    "sessions_of_runs",
]

log = logging.getLogger(__name__)

_KEPT = "__kept"
_RUN_START = "__run_start"
_CUTS = "__cuts"


def session_hours(view: View, segments: Sequence[int]) -> tuple[list[int], list[int]]:
    """(lookback hours before the first segment, hours after the last) the correction reads."""
    assert view.session is not None
    spec = view.session
    before = -(-(spec.max_duration_ms + spec.gap_ms) // HOUR_MS)
    after = -(-spec.max_duration_ms // HOUR_MS)
    first, last = min(segments), max(segments)
    return (
        [first - k * HOUR_MS for k in range(before, 0, -1)],
        [last + k * HOUR_MS for k in range(1, after + 1)],
    )


def session_batch_schema(view: View) -> pa.Schema:
    """Columns of a session view's batch segment file: key, bounds, counts, kept, metrics."""
    fields = view.session_fields(pa.int64())
    for agg in view.aggregators:
        fields += agg.output_fields()
    return segment_schema(fields, view.name, view.fingerprint, "batch")


def sessionize(events: DataFrame, view: View) -> DataFrame:
    """Each event with the start of its session, in Spark's own operators (no Python worker):
    :func:`session_runs`, then :func:`sessions_of_runs`.

    Not ``mapInPandas``: through the warm Spark Connect server every correction run is a new
    session, and each session would start a Python worker daemon of its own (seconds per run,
    and one more idle daemon on the server per run).
    """
    return sessions_of_runs(session_runs(events, view), view)


def session_runs(events: DataFrame, view: View) -> DataFrame:
    """Each event with the start of its *run*: per key, in the topic's order
    (:func:`~pipelines.batch.archive.order_columns`), a gap of at least ``gap`` starts one (a
    running window over the key). A run shorter than ``max_duration`` is one session."""
    spec = view.session
    assert spec is not None
    ordered = Window.partitionBy(spec.key).orderBy(*order_columns(declaration_of(view)))
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    previous = F.lag("event_time").over(ordered)
    starts_run = previous.isNull() | (F.col("event_time") - previous >= F.lit(spec.gap_ms))
    rows = events.withColumn(_RUN_START, F.when(starts_run, F.col("event_time")))
    # Times ascend within a key, so the latest run start so far is the running maximum.
    return rows.withColumn(_RUN_START, F.max(_RUN_START).over(so_far))


def sessions_of_runs(rows: DataFrame, view: View) -> DataFrame:
    """:func:`session_runs`' events with the start of their session. Only the events at least
    ``max_duration`` after their run's start need the sequential rule (a session ends where
    an event comes ``max_duration`` after its start): their run's times are folded into its
    cut points (``aggregate``, one row per long run, broadcast back), and each such event
    takes the last cut at or before it.

    ``rows`` is read three times (the short runs, the long ones, their cuts): a caller that
    persists it sorts the events by key once instead of three times."""
    spec = view.session
    assert spec is not None
    beyond = F.col("event_time") - F.col(_RUN_START) >= F.lit(spec.max_duration_ms)
    short = rows.where(~beyond).withColumn(SESSION_START, F.col(_RUN_START))
    late = rows.where(beyond)
    limit = F.lit(spec.max_duration_ms)

    def fold(acc: Column, t: Column) -> Column:
        cut = t - acc["start"] >= limit
        return F.struct(
            F.when(cut, t).otherwise(acc["start"]).alias("start"),
            F.when(cut, F.concat(acc["cuts"], F.array(t))).otherwise(acc["cuts"]).alias("cuts"),
        )

    zero = F.struct(F.col(_RUN_START).alias("start"), F.array().cast("array<bigint>").alias("cuts"))
    cuts = (
        late.groupBy(spec.key, _RUN_START)
        .agg(F.array_sort(F.collect_list("event_time")).alias(_CUTS))
        .select(spec.key, _RUN_START, F.aggregate(_CUTS, zero, fold)["cuts"].alias(_CUTS))
    )
    matched = late.join(F.broadcast(cuts), on=[spec.key, _RUN_START])
    own_cut = F.element_at(F.filter(_CUTS, lambda c: c <= F.col("event_time")), -1)
    long = matched.withColumn(SESSION_START, own_cut).drop(_CUTS)
    return short.unionByName(long).drop(_RUN_START)


def _aggregate_sessions(events: DataFrame, view: View, segments: Sequence[int]) -> pa.Table:
    """Exact sessions that start in ``segments``, one row each, sorted by start and key."""
    spec = view.session
    assert spec is not None
    columns = {*order_columns(declaration_of(view)), spec.key, *spec.kept_fields}
    columns |= {c for a in view.aggregators for c in a.columns_read()}
    events = with_derived(events.where(F.col("topic") == view.topic), view)
    if view.filter is not None:
        events = events.where(view.filter.spark())
        columns |= set(view.filter.fields)
    runs = session_runs(events.select(*sorted(columns)), view)
    # Read three times below: persisted, the events are read, deduplicated and sorted by key
    # once, not three times.
    runs = runs.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _session_rows(runs, view, segments)
    finally:
        with contextlib.suppress(Exception):  # a lost server: not to hide why the run failed
            runs.unpersist()


def _session_rows(runs: DataFrame, view: View, segments: Sequence[int]) -> pa.Table:
    """:func:`_aggregate_sessions` once the events' runs are known."""
    spec = view.session
    assert spec is not None
    rows = sessions_of_runs(runs, view)
    segment = F.col(SESSION_START) - F.col(SESSION_START) % F.lit(HOUR_MS)
    rows = rows.where(segment.isin(list(segments)))
    keys = [spec.key, SESSION_START]
    exprs = [
        F.count(F.lit(1)).alias(EVENT_COUNT),
        F.max("event_time").alias(SESSION_END),
    ]
    if spec.kept_fields:
        order = order_columns(declaration_of(view))
        kept = F.struct(*order, *(c for c in spec.kept_fields if c not in order))
        exprs.append(
            F.slice(F.sort_array(F.collect_list(kept)), 1, spec.max_kept_events).alias(_KEPT)
        )
    frames = []
    for agg in view.aggregators:
        frame = spark_frame_of(agg)
        if frame is not None:
            frames.append(frame(rows, keys))
        else:
            exprs += agg.spark_columns(F.col("event_time"))
    result = rows.groupBy(*keys).agg(*exprs)
    for frame in frames:
        result = join_on_keys(result, frame, keys)
    collected = result.toArrow()
    schema = session_batch_schema(view)
    if not collected.num_rows:
        return schema.empty_table()
    counts = collected.column(EVENT_COUNT).to_numpy()
    if spec.kept_fields:
        names = ("event_time", *spec.kept_fields)
        kept_json = [
            orjson.dumps([{n: e[n] for n in names} for e in events]).decode()
            for events in collected.column(_KEPT).to_pylist()
        ]
        dropped = np.maximum(counts - spec.max_kept_events, 0)
    else:
        kept_json = ["[]"] * collected.num_rows
        dropped = np.zeros(collected.num_rows, dtype=np.int64)
    data = {name: collected.column(name) for name in schema.names if name in collected.schema.names}
    data[OPEN] = pa.array([False] * collected.num_rows)
    data[KEPT_EVENTS] = pa.array(kept_json)
    data[KEPT_DROPPED] = pa.array(dropped, type=pa.int64())
    table = pa.table([data[name] for name in schema.names], names=schema.names)
    table = table.cast(schema)
    return table.sort_by([(SESSION_START, "ascending"), (spec.key, "ascending")])


def _aggregate_and_count(
    events: DataFrame, view: View, segments: Sequence[int]
) -> tuple[pa.Table, dict[int, tuple[int, int]]]:
    """:func:`_aggregate_sessions`, and (events, duplicates dropped) per segment from the same
    cached read."""
    events = events.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        table = _aggregate_sessions(events, view, segments)
        stats = (
            events.where(F.col("topic") == view.topic)
            .where(F.col(HOUR).isin(list(segments)))
            .groupBy(HOUR)
            .agg(F.count(F.lit(1)).alias("n"), F.sum(COPIES).alias("copies"))
            .collect()
        )
    finally:
        # Not to hide why the run failed: a lost Spark Connect server fails this too.
        with contextlib.suppress(Exception):
            events.unpersist()
    return table, {row[HOUR]: (row["n"], row["copies"] - row["n"]) for row in stats}


def correct_session_hours(
    spark: SparkSession,
    store: ObjectStore,
    view: View,
    hours: Sequence[int],
    *,
    target: TableTarget,
    s3_scheme: str = "s3a",
    emit: Callable[[CorrectionResult], None],
    counted: Mapping[tuple[str, int], tuple[int, int]] | None = None,
) -> None:
    """Correct the segments (start hours) ``hours`` of one session view; one result each.

    ``counted``: (events, duplicates dropped) per (topic, hour) that the windowed views'
    correction already counted; when it holds every segment, the events are read once,
    without a cache and without a second Spark job to count them.

    1. lists the archive of the segments and of the lookback and following hours; a segment
       whose own hour has no archive is skipped, never published;
    2. reads the view's topic in them in one Spark read, deduplicated by its id (if it
       declares one), and cuts sessions per key;
    3. aggregates the sessions starting in the segments with the registry's expressions;
    4. publishes each segment's sessions as its next batch version (one commit to the table).
    """
    segments = sorted(set(hours))
    before, after = session_hours(view, segments)
    listed = list_hour_files(store, sorted({*before, *segments, *after}))  # 1
    files = topic_files(listed, view.topic)
    declaration = declaration_of(view)
    todo = []
    for segment in segments:
        if segment in files:
            todo.append(segment)
            continue
        reason = f"no archived events for hour {hour_label(segment)}"
        emit(CorrectionResult.skipped_for(view.name, segment, reason))
    if not todo:
        return
    started = time.monotonic()
    known = counted or {}
    if all((view.topic, h) in known for h in todo):
        events = read_hours(spark, store, listed, s3_scheme, declaration)
        table = _aggregate_sessions(events, view, todo)  # 2, 3
        counts = {h: known[(view.topic, h)] for h in todo}
    else:
        events = read_hours(spark, store, listed, s3_scheme, declaration)
        table, counts = _aggregate_and_count(events, view, todo)  # 2, 3
    share = (time.monotonic() - started) / len(todo)
    starts = table.column(SESSION_START).to_numpy()
    write_started = time.monotonic()
    read = [hour_label(h) for h in sorted(files)]
    parts = [
        SegmentRows(
            segment,
            table.filter(pa.array((starts >= segment) & (starts < segment + HOUR_MS))),
            *counts.get(segment, (0, 0)),
            read,
        )
        for segment in todo
    ]
    published = publish_versions(target, view, parts)  # 4, one commit
    write_share = (time.monotonic() - write_started) / len(parts)
    for part, (version, keys) in zip(parts, published, strict=True):
        log.info(
            "%s %s: published batch v%d, %d sessions",
            view.name,
            hour_label(part.segment),
            version,
            part.table.num_rows,
        )
        emit(
            CorrectionResult(
                view.name,
                part.segment,
                version,
                part.table.num_rows,
                part.events,
                part.duplicates,
                tuple(keys),
                round(share + write_share, 3),
                hours=tuple(read),
            )
        )
