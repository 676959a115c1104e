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

Per key, events are ordered by (event time, event id) (the stream orders ties by offset, which
only changes which of two simultaneous events is kept first). Corrected sessions are final:
``open`` is false, so correct an hour only once the stream has passed it by ``max_duration``
and the allowed lateness.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

import numpy as np
import orjson
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from pipelines.batch.archive import (
    COPIES,
    HOUR,
    list_hour_files,
    read_hours,
)
from pipelines.batch.frames import join_on_keys, spark_frame_of
from pipelines.batch.publish import CorrectionResult, publish_version
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

__all__ = ["correct_session_hours", "session_batch_schema", "session_hours", "session_starts"]

log = logging.getLogger(__name__)

_KEPT = "__kept"


def session_starts(
    times: np.ndarray,
    gap_ms: int,
    max_duration_ms: int,
    open_session: tuple[int, int] | None = None,
) -> np.ndarray:
    """The start of each event's session, for one key's event times in ascending order;
    ``open_session`` is the (start, last event time) of a session the first event may join."""
    starts = np.empty(len(times), dtype=np.int64)
    if not len(times):
        return starts
    breaks = np.flatnonzero(np.diff(times) >= gap_ms) + 1
    bounds = [0, *breaks.tolist(), len(times)]
    for a, b in pairwise(bounds):
        start = int(times[a])
        if a == 0 and open_session is not None:
            first, last = open_session
            if start - last < gap_ms and start - first < max_duration_ms:
                start = first
        if int(times[b - 1]) - start < max_duration_ms:
            starts[a:b] = start
            continue
        for i in range(a, b):  # a run longer than max_duration: cut it event by event
            if int(times[i]) - start >= max_duration_ms:
                start = int(times[i])
            starts[i] = start
    return starts


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


def _sessionize(events: DataFrame, view: View) -> DataFrame:
    """Each event with the start of its session: the events are partitioned by key and sorted
    by (key, event time, event id) in Spark, then cut in one pandas call per Arrow batch,
    carrying the open session of the last key over to the next batch of the partition."""
    spec = view.session
    assert spec is not None
    schema = StructType([*events.schema.fields, StructField(SESSION_START, LongType(), False)])

    def cut(frames):
        carry: tuple[str, int, int] | None = None  # (key, session start, last event time)
        for frame in frames:
            if frame.empty:
                yield frame.assign(**{SESSION_START: np.empty(0, dtype=np.int64)})
                continue
            keys = frame[spec.key].to_numpy()
            times = frame["event_time"].to_numpy(dtype=np.int64)
            starts = np.empty(len(times), dtype=np.int64)
            edges = np.flatnonzero(keys[1:] != keys[:-1]) + 1
            bounds = [0, *edges.tolist(), len(times)]
            for a, b in pairwise(bounds):
                # The partition's previous batch may have ended inside this key's session.
                open_session = carry[1:] if carry is not None and carry[0] == keys[a] else None
                starts[a:b] = session_starts(
                    times[a:b], spec.gap_ms, spec.max_duration_ms, open_session
                )
            if len(times):
                last = len(times) - 1
                carry = (keys[last], int(starts[last]), int(times[last]))
            yield frame.assign(**{SESSION_START: starts})

    ordered = events.repartition(spec.key).sortWithinPartitions(spec.key, "event_time", "event_id")
    return ordered.mapInPandas(cut, schema=schema)


def _aggregate_sessions(events: DataFrame, view: View, segments: Sequence[int]) -> pa.Table:
    """Exact sessions that start in ``segments``, one row each, sorted by start and key."""
    spec = view.session
    assert spec is not None
    columns = {"event_time", "event_id", spec.key, *spec.kept_fields}
    columns |= {c for a in view.aggregators for c in a.columns_read()}
    events = events.where(F.col("topic") == view.topic)
    if view.filter is not None:
        events = events.where(view.filter.spark())
        columns |= set(view.filter.fields)
    rows = _sessionize(events.select(*sorted(columns)), view)
    segment = F.col(SESSION_START) - F.col(SESSION_START) % F.lit(HOUR_MS)
    rows = rows.where(segment.isin(list(segments)))
    keys = [spec.key, SESSION_START]
    exprs = [
        F.count(F.lit(1)).alias(EVENT_COUNT),
        F.max("event_time").alias(SESSION_END),
    ]
    if spec.kept_fields:
        kept = F.struct("event_time", "event_id", *spec.kept_fields)
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
    2. reads them in one Spark read, deduplicated by event id, and cuts sessions per key;
    3. aggregates the sessions starting in the segments with the registry's expressions;
    4. publishes each segment's sessions as its next batch version (manifest last).
    """
    segments = sorted(set(hours))
    before, after = session_hours(view, segments)
    files = list_hour_files(store, sorted({*before, *segments, *after}))  # 1
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
        table = _aggregate_sessions(read_hours(spark, store, files, s3_scheme), view, todo)  # 2, 3
        counts = {h: known[(view.topic, h)] for h in todo}
    else:
        events = read_hours(spark, store, files, s3_scheme)
        table, counts = _aggregate_and_count(events, view, todo)  # 2, 3
    share = (time.monotonic() - started) / len(todo)
    starts = table.column(SESSION_START).to_numpy()
    for segment in todo:  # 4
        write_started = time.monotonic()
        part = table.filter(pa.array((starts >= segment) & (starts < segment + HOUR_MS)))
        n_events, duplicates = counts.get(segment, (0, 0))
        read = [hour_label(h) for h in sorted(files)]
        version, keys = publish_version(store, view, segment, part, n_events, duplicates, read)
        log.info(
            "%s %s: published batch v%d, %d sessions",
            view.name,
            hour_label(segment),
            version,
            part.num_rows,
        )
        emit(
            CorrectionResult(
                view.name,
                segment,
                version,
                part.num_rows,
                n_events,
                duplicates,
                tuple(keys),
                round(share + time.monotonic() - write_started, 3),
                hours=tuple(read),
            )
        )
