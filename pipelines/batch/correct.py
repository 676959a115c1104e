"""The batch correction: recompute views exactly from the raw archive and publish a new version.

Stream workers drop events that come too late, count duplicates twice and answer distinct
counts and quantiles from sketches. The correction reads what the archive holds for whole
segments (late events included), drops duplicate ``event_id``s, computes every aggregation
exactly with the Spark expressions of the aggregator registry and publishes the result as
a batch version that overshadows the segment's realtime partials, as in Druid.

Per (view, segment), :func:`correct_hours`:

1. lists the archive files of every hour of the segment; no file at all means the segment
   is skipped, never published (an empty version would hide the realtime values);
2. reads the files of all segments of all views in one Spark read, drops duplicates and
   caches the result, so every view is computed from the same events;
3. aggregates the views that share a window and grouping in one pass (plus one two-stage
   pass per ``top_k``), collects the small result through Arrow and checks each view's
   rows with ``validate_segment`` if given (its error stops the run before anything of
   those views is published);
4. writes ``batch/v<N+1>/part-00000.parquet`` through the ObjectStore (so S3 works
   without Hadoop committers), then, last, publishes ``_published.json`` atomically.

The archive is immutable per hour once the stream has passed it, and the computation is
deterministic (sorted output, duplicates resolved by content), so a rerun publishes the
next version with identical values.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.aggregators import Aggregator
from pipelines.archive.writer import ARCHIVE_SCHEMA
from pipelines.batch.exceptions import InvalidHour
from pipelines.batch.frames import join_on_keys
from pipelines.batch.spark import spark_uri
from pipelines.segments import (
    HOUR_MS,
    archive_events_key,
    batch_prefix,
    hour_label,
    parse_hour_label,
    published_key,
    to_parquet,
)
from pipelines.serving.query import read_published
from pipelines.storage import ObjectStore
from pipelines.views.model import WINDOW_START, View

__all__ = [
    "CorrectionResult",
    "archive_hours",
    "batch_schema",
    "correct_hours",
    "segment_hours",
]

log = logging.getLogger(__name__)

_KAFKA_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp")
_EVENT_PAYLOAD = [f.name for f in ARCHIVE_SCHEMA if f.name not in (*_KAFKA_COLUMNS, "event_id")]
"""Event columns besides the id; where a copy sat in Kafka never changes a view's values."""
_COPIES = "__copies"
_ID_HASH = "__id_hash"
_HOUR = "__hour"
_EVENTS = "__events"
PART_FILE = "part-00000.parquet"


@dataclass(frozen=True)
class CorrectionResult:
    """What the correction did for one (view, segment).

    ``version`` is the published version, 0 when ``skipped``. ``seconds`` is the wall time
    of the view's aggregation shared evenly by its segments, plus this segment's write.
    """

    view: str
    segment_start_ms: int
    version: int
    rows: int
    events: int
    duplicates_dropped: int
    files: tuple[str, ...]
    seconds: float
    skipped: bool = False
    reason: str = ""
    hours: tuple[str, ...] = ()
    """Hour labels whose archive was read for this segment."""
    hours_missing: tuple[str, ...] = ()
    """Hours of the segment without any archived event (no traffic, or not archived yet)."""

    @property
    def segment(self) -> str:
        return hour_label(self.segment_start_ms)


def _events_hour_prefix(hour_ms: int) -> str:
    # Derived from the writer's key so the two can never disagree.
    return archive_events_key(hour_ms, "t", 0, 0, 0).rpartition("/")[0] + "/"


_EVENTS_ROOT = _events_hour_prefix(0).rsplit("hour=", 1)[0]


def archive_hours(store: ObjectStore) -> list[int]:
    """Hour starts (epoch ms) for which the archive holds at least one events file.

    Lists the whole events archive: fine locally, a long listing on a large S3 bucket.
    """
    hours: set[int] = set()
    for key in store.list(_EVENTS_ROOT):
        part = key[len(_EVENTS_ROOT) :].split("/", 1)[0]
        if part.startswith("hour=") and key.endswith(".parquet"):
            hours.add(parse_hour_label(part.removeprefix("hour=")))
    return sorted(hours)


def segment_hours(view: View, segment_start_ms: int) -> list[int]:
    """Every hour whose events can belong to the segment's windows."""
    return list(range(segment_start_ms, segment_start_ms + view.segment_ms, HOUR_MS))


def batch_schema(view: View) -> pa.Schema:
    """Columns of a batch segment file: window_start (epoch ms), groups, aggregator outputs."""
    fields = [pa.field(WINDOW_START, pa.int64())]
    fields += [pa.field(col, pa.string()) for col in view.grouping_cols]
    for agg in view.aggregators:
        fields += agg.output_fields()
    meta = {"view": view.name, "fingerprint": view.fingerprint, "kind": "batch"}
    return pa.schema(fields, metadata={"sluice": json.dumps(meta)})


def _check_hours(hours: Sequence[int]) -> list[int]:
    bad = [h for h in hours if not isinstance(h, int) or h % HOUR_MS]
    if bad:
        raise InvalidHour(f"hours must be epoch-ms hour starts (multiples of {HOUR_MS}), got {bad}")
    return sorted(set(hours))


def _list_hour_files(store: ObjectStore, hours: Sequence[int]) -> dict[int, list[str]]:
    files = {}
    for hour in hours:
        keys = [k for k in store.list(_events_hour_prefix(hour)) if k.endswith(".parquet")]
        if keys:
            files[hour] = keys
    return files


def _read_deduplicated(spark: SparkSession, uris: list[str]) -> DataFrame:
    """The archived events, one row per (topic, event_id), with how many copies there were.

    Duplicates are rare, so only they pay for a sort, and no plan shuffles every event:

    1. a hash aggregation over a 64-bit hash of (topic, event_id), reading only those two
       columns, finds the hashes seen more than once: the candidates, a small set;
    2. events whose hash is not a candidate pass through untouched (a broadcast anti-join);
    3. the candidates' events are grouped by their real (topic, event_id), and each id keeps
       its smallest copy by content (not by arrival, so the choice never depends on how
       Spark split the files). A hash collision only makes two distinct ids candidates: they
       are still told apart here, so the result stays exact.

    The candidates are broadcast explicitly: Spark's own estimate of their size is that of
    every id before the ``> 1`` filter, which at a few million events turned both joins
    into sort-merge joins of every event (55% of a correction's time at 4M events).
    """
    raw = spark.read.schema(from_arrow_schema(ARCHIVE_SCHEMA)).parquet(*uris)
    ids = ["topic", "event_id"]
    key = F.xxhash64(*ids).alias(_ID_HASH)
    counted = raw.select(key).groupBy(_ID_HASH).agg(F.count(F.lit(1)).alias(_COPIES))
    candidates = F.broadcast(counted.where(F.col(_COPIES) > 1).select(_ID_HASH))
    hashed = raw.withColumn(_ID_HASH, F.xxhash64(*ids))
    single = hashed.join(candidates, on=_ID_HASH, how="left_anti").select(
        *ids, *_EVENT_PAYLOAD, F.lit(1).cast("long").alias(_COPIES)
    )
    first = F.min(F.struct(*_EVENT_PAYLOAD)).alias("e")
    resolved = (
        hashed.join(candidates, on=_ID_HASH, how="left_semi")
        .groupBy(*ids)
        .agg(first, F.count(F.lit(1)).alias(_COPIES))
        .select(*ids, *(F.col(f"e.{c}").alias(c) for c in _EVENT_PAYLOAD), _COPIES)
    )
    events = single.unionByName(resolved)
    return events.withColumn(_HOUR, F.col("event_time") - F.col("event_time") % F.lit(HOUR_MS))


def _columns_read(view: View) -> set[str]:
    columns = {"event_time", *view.grouping_cols}
    return columns | {a.spec.col_name for a in view.aggregators if a.spec.col_name}


def _spark_frame(agg: Aggregator) -> Callable[[DataFrame, list[str]], DataFrame] | None:
    """An aggregator whose exact result needs more than one aggregate (``top_k``) provides
    ``spark_frame(events, keys) -> DataFrame`` of keys plus its output columns."""
    frame = getattr(agg, "spark_frame", None)
    return frame if callable(frame) else None


def _aggregation_key(view: View) -> tuple:
    """Views with equal keys aggregate the same rows into the same groups."""
    return (view.topic, view.interval_ms, view.segment_ms, tuple(view.grouping_cols))


def _aggregate_views(
    events: DataFrame,
    views: Sequence[View],
    segments: Sequence[int],
    validate: Callable[[DataFrame, View], None] | None = None,
) -> list[pa.Table]:
    """Exact values of every window of ``segments`` for views sharing one
    :func:`_aggregation_key`: one row per (window, group) and view, sorted.

    The views share one ``groupBy`` (one read of the cached events, one shuffle, one
    collect) instead of one each; each view's columns are prefixed inside it so two views
    may name an output alike.
    """
    view = views[0]
    window = F.col("event_time") - F.col("event_time") % F.lit(view.interval_ms)
    rows = events.where(F.col("topic") == view.topic).withColumn(WINDOW_START, window)
    segment = F.col(WINDOW_START) - F.col(WINDOW_START) % F.lit(view.segment_ms)
    rows = rows.where(segment.isin(list(segments)))
    keys = [WINDOW_START, *view.grouping_cols]
    columns: list[Column] = [F.count(F.lit(1)).alias(_EVENTS)]
    frames: list[DataFrame] = []
    outputs: list[tuple[pa.Schema, dict[str, str]]] = []
    for i, member in enumerate(views):
        prefix = f"__v{i}_"
        schema = batch_schema(member)
        names = {name: f"{prefix}{name}" for name in schema.names if name not in keys}
        outputs.append((schema, names))
        for agg in member.aggregators:
            frame = _spark_frame(agg)
            if frame is not None:
                out = frame(rows, keys)
                renamed = [F.col(c).alias(f"{prefix}{c}") for c in out.columns if c not in keys]
                frames.append(out.select(*keys, *renamed))
            else:
                exprs = agg.spark_columns(F.col("event_time"))
                fields = agg.output_fields()
                columns += [
                    c.alias(f"{prefix}{f.name}") for c, f in zip(exprs, fields, strict=True)
                ]
    result = rows.groupBy(*keys).agg(*columns)
    for frame in frames:
        result = join_on_keys(result, frame, keys)
    collected = result.toArrow()
    tables = []
    for member, (schema, names) in zip(views, outputs, strict=True):
        own = [F.col(names[n]).alias(n) if n in names else F.col(n) for n in schema.names]
        table = collected.select([names.get(n, n) for n in schema.names])
        table = table.rename_columns(schema.names)
        if validate is not None:
            # The checks run on the collected rows, as a local frame with the same Spark
            # types: their jobs then read a few hundred rows in the driver, not the cached
            # events again through the aggregation's plan (persisting it cost more jobs).
            output = result.select(*own)
            validate(output.sparkSession.createDataFrame(table, schema=output.schema), member)
        table = table.cast(schema) if table.num_rows else schema.empty_table()
        tables.append(table.sort_by([(name, "ascending") for name in keys]))
    return tables


def _publish(
    store: ObjectStore,
    view: View,
    segment: int,
    table: pa.Table,
    events: int,
    duplicates: int,
    hours: list[str],
) -> tuple[int, list[str]]:
    """Write the next version's file, then, last, its manifest; returns (version, files)."""
    current = read_published(store, view.name, segment)
    version = int(current["version"]) + 1 if current else 1
    key = f"{batch_prefix(view.name, segment, version)}{PART_FILE}"
    store.put(key, to_parquet(table))
    manifest = {
        "version": version,
        "files": [key],
        "kind": "batch",
        "created_at": int(time.time()),
        "events": events,
        "duplicates_dropped": duplicates,
        "hours": hours,
    }
    store.put(published_key(view.name, segment), json.dumps(manifest, indent=2).encode())
    return version, [key]


def correct_hours(
    spark: SparkSession,
    store: ObjectStore,
    views: Sequence[View],
    hours: Sequence[int],
    *,
    s3_scheme: str = "s3a",
    on_result: Callable[[CorrectionResult], None] | None = None,
    validate_segment: Callable[[DataFrame, View], None] | None = None,
) -> list[CorrectionResult]:
    """Correct every segment of every view that covers one of ``hours`` (epoch-ms hour starts).

    Returns one result per (view, segment), in view order then time order; segments whose
    hours have no archive are skipped with a warning, not published. ``on_result`` is
    called as each result is ready (progress display). ``validate_segment(frame, view)`` checks
    each view's rows before they are published and raises to stop the correction (the data
    plane stays free of the quality layer: callers pass ``quality.schemas``' validator).

    Session views are corrected by :func:`pipelines.batch.sessions.correct_session_hours`
    (their segments are the hours sessions started in; ``validate_segment`` is not applied).
    """
    wanted = _check_hours(hours)
    order = {view.name: i for i, view in enumerate(views)}
    results: list[CorrectionResult] = []

    def emit(result: CorrectionResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    _correct_windows(
        spark,
        store,
        [v for v in views if not v.is_session],
        wanted,
        s3_scheme,
        emit,
        validate_segment,
    )
    session_views = [v for v in views if v.is_session]
    if session_views:
        # Imported here: the session correction builds on this module's reading and publishing.
        from pipelines.batch.sessions import correct_session_hours

        for view in session_views:
            segments = sorted({view.segment_start(h) for h in wanted})
            correct_session_hours(spark, store, view, segments, s3_scheme=s3_scheme, emit=emit)
    results.sort(key=lambda r: (order[r.view], r.segment_start_ms))
    return results


def _correct_windows(
    spark: SparkSession,
    store: ObjectStore,
    views: Sequence[View],
    wanted: list[int],
    s3_scheme: str,
    emit: Callable[[CorrectionResult], None],
    validate_segment: Callable[[DataFrame, View], None] | None,
) -> None:
    """Steps 1-4 for the windowed views."""
    plan: dict[str, list[int]] = {
        view.name: sorted({view.segment_start(h) for h in wanted}) for view in views
    }
    by_name = {view.name: view for view in views}
    needed = sorted(
        {h for name, segs in plan.items() for s in segs for h in segment_hours(by_name[name], s)}
    )
    files = _list_hour_files(store, needed)
    todo: dict[str, list[int]] = {}
    for view in views:
        for segment in plan[view.name]:
            if any(h in files for h in segment_hours(view, segment)):
                todo.setdefault(view.name, []).append(segment)
                continue
            labels = [hour_label(h) for h in segment_hours(view, segment)]
            reason = f"no archived events for hour(s) {', '.join(labels)}"
            log.warning("%s %s: skipped, %s", view.name, hour_label(segment), reason)
            emit(CorrectionResult(view.name, segment, 0, 0, 0, 0, (), 0.0, True, reason))
    if not todo:
        return

    # 2. One read of every needed hour, deduplicated and cached for all views.
    started = time.monotonic()
    # Hour directories, not file paths: Spark checks every path it is given one by one
    # (~40 ms each locally, a request each on S3), but lists a directory in one go.
    uris = [spark_uri(store, _events_hour_prefix(hour), s3_scheme) for hour in sorted(files)]
    # Cache only the columns the views read: building Spark's columnar cache is the most
    # expensive step after deduplication, and event_id (unique strings) rarely is one.
    used = {c for view in views if view.name in todo for c in _columns_read(view)}
    keep = ["topic", "event_time", _COPIES, _HOUR, *sorted(used - {"topic", "event_time"})]
    events = _read_deduplicated(spark, uris).select(*keep).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts: dict[tuple[str, int], tuple[int, int]] = defaultdict(lambda: (0, 0))
        stats = events.groupBy("topic", _HOUR).agg(
            F.count(F.lit(1)).alias("events"), F.sum(_COPIES).alias("copies")
        )
        for row in stats.collect():
            counts[(row["topic"], row[_HOUR])] = (row["events"], row["copies"] - row["events"])
        log.info(
            "read %d file(s) of %d hour(s): %d events, %d duplicates dropped, in %.1fs",
            sum(len(keys) for keys in files.values()),
            len(files),
            sum(c[0] for c in counts.values()),
            sum(c[1] for c in counts.values()),
            time.monotonic() - started,
        )
        groups: dict[tuple, list[View]] = defaultdict(list)
        for view in views:
            if view.name in todo:
                groups[(_aggregation_key(view), tuple(todo[view.name]))].append(view)
        for (_, segments), members in groups.items():
            group_started = time.monotonic()
            tables = _aggregate_views(events, members, segments, validate_segment)  # 3
            share = (time.monotonic() - group_started) / (len(segments) * len(members))
            for view, table in zip(members, tables, strict=True):
                _publish_view(store, view, segments, table, share, files, counts, emit)
    finally:
        events.unpersist()


def _publish_view(
    store: ObjectStore,
    view: View,
    segments: Sequence[int],
    table: pa.Table,
    share: float,
    files: dict[int, list[str]],
    counts: dict[tuple[str, int], tuple[int, int]],
    emit: Callable[[CorrectionResult], None],
) -> None:
    """Publish each segment's rows of ``table`` (step 4) and report it."""
    starts = table.column(WINDOW_START).to_numpy()
    for segment in segments:
        write_started = time.monotonic()
        in_segment = (starts >= segment) & (starts < segment + view.segment_ms)
        part = table.filter(pa.array(in_segment))
        seg_hours = segment_hours(view, segment)
        read = [hour_label(h) for h in seg_hours if h in files]
        missing = tuple(hour_label(h) for h in seg_hours if h not in files)
        n_events = sum(counts[(view.topic, h)][0] for h in seg_hours)
        duplicates = sum(counts[(view.topic, h)][1] for h in seg_hours)
        if missing:
            log.warning(
                "%s %s: no archive for hour(s) %s; publishing what the others hold",
                view.name,
                hour_label(segment),
                ", ".join(missing),
            )
        version, keys = _publish(  # 4
            store, view, segment, part, n_events, duplicates, read
        )
        seconds = share + time.monotonic() - write_started
        log.info(
            "%s %s: published batch v%d, %d rows from %d events (%d duplicates)",
            view.name,
            hour_label(segment),
            version,
            part.num_rows,
            n_events,
            duplicates,
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
                round(seconds, 3),
                hours=tuple(read),
                hours_missing=missing,
            )
        )
