"""The windowed views' correction: exact values of every window from the deduplicated archive.

Views that share a window and grouping are aggregated in one pass (plus one two-stage pass per
``top_k``); each segment's rows are then published as its next batch version.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.batch.archive import (
    COPIES,
    HOUR,
    archive_bytes,
    list_hour_files,
    read_hours,
    topic_files,
)
from pipelines.batch.derived import stored_columns, with_derived
from pipelines.batch.frames import join_on_keys, spark_frame_of
from pipelines.batch.publish import (
    CorrectionResult,
    SegmentRows,
    TableTarget,
    is_corrected,
    publish_versions,
)
from pipelines.batch.spark import fit_shuffle_partitions
from pipelines.segments import HOUR_MS, hour_label, segment_schema, state_column
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import WINDOW_START, View
from pipelines.views.topics import declaration_of

__all__ = [
    "aggregate_window_views",
    "batch_schema",
    "correct_window_hours",
    "segment_hours",
    "segments_of_hour",
]

log = logging.getLogger(__name__)

_EVENTS = "__events"


def segment_hours(view: View, segment_start_ms: int) -> list[int]:
    """Every hour whose events can belong to the segment's windows (a sliding window may
    reach ``interval - slide`` into the next segment)."""
    end = segment_start_ms + view.segment_ms + view.reach_ms
    return list(range(segment_start_ms, end, HOUR_MS))


def segments_of_hour(view: View, hour_ms: int) -> set[int]:
    """Segments whose windows hold events of the hour: its own, and with sliding windows
    the ones whose windows reach into it."""
    return {view.segment_start(hour_ms), view.segment_start(hour_ms - view.reach_ms)}


def _segments_to_correct(tables: Tables, view: View, wanted: list[int]) -> list[int]:
    """The hours' own segments, and the earlier segments whose sliding windows reach into
    them where those were corrected already (their windows were exact only up to what the
    archive held then); a segment never corrected stays so."""
    own = {view.segment_start(h) for h in wanted}
    reaching = {s for h in wanted for s in segments_of_hour(view, h)} - own
    return sorted(own | {s for s in reaching if is_corrected(tables, view, s)})


def batch_schema(view: View) -> pa.Schema:
    """Columns of a batch segment file: window_start (epoch ms), groups, aggregator outputs,
    then each aggregation's state in the stream's format (null where Spark cannot build it),
    so corrected windows roll up (:mod:`pipelines.serving.rollup`)."""
    fields = [pa.field(WINDOW_START, pa.int64())]
    fields += [pa.field(col, pa.string()) for col in view.grouping_cols]
    for agg in view.aggregators:
        fields += agg.output_fields()
    fields += [pa.field(state_column(agg.out), pa.binary()) for agg in view.aggregators]
    return segment_schema(fields, view.name, view.fingerprint, "batch")


def _columns_read(view: View) -> set[str]:
    columns = {"event_time", *view.grouping_cols}
    columns |= set(view.filter.fields) if view.filter is not None else set()
    return stored_columns(view, columns | {c for a in view.aggregators for c in a.columns_read()})


def _aggregation_key(view: View) -> tuple:
    """Views with equal keys aggregate the same rows into the same groups."""
    return (
        view.topic,
        view.interval_ms,
        view.slide_ms,
        view.segment_ms,
        tuple(view.grouping_cols),
        view.where,
    )


def aggregate_window_views(
    events: DataFrame,
    views: Sequence[View],
    segments: Sequence[int],
    validate: Callable[[DataFrame, View], None] | None = None,
    validate_rows: Callable[[pa.Table, View], None] | None = None,
) -> list[pa.Table]:
    """Exact values of every window of ``segments`` for views sharing one
    :func:`_aggregation_key`: one row per (window, group) and view, sorted.

    The views share one ``groupBy`` (one read of the cached events, one shuffle, one
    collect) instead of one each; each view's columns are prefixed inside it so two views
    may name an output alike.
    """
    view = views[0]
    window = F.col("event_time") - F.col("event_time") % F.lit(view.step_ms)
    if view.is_sliding:  # every window holding the event: one row per window
        window = F.explode(F.sequence(window - F.lit(view.reach_ms), window, F.lit(view.step_ms)))
    rows = with_derived(events.where(F.col("topic") == view.topic), view)
    if view.filter is not None:
        rows = rows.where(view.filter.spark())
    rows = rows.withColumn(WINDOW_START, window)
    segment = F.col(WINDOW_START) - F.col(WINDOW_START) % F.lit(view.segment_ms)
    rows = rows.where(segment.isin(list(segments)))
    keys = [WINDOW_START, *view.grouping_cols]
    columns: list[Column] = [F.count(F.lit(1)).alias(_EVENTS)]
    states: list[Column] = []
    frames: list[DataFrame] = []
    outputs: list[tuple[pa.Schema, dict[str, str]]] = []
    for i, member in enumerate(views):
        prefix = f"__v{i}_"
        schema = batch_schema(member)
        names = {name: f"{prefix}{name}" for name in schema.names if name not in keys}
        outputs.append((schema, names))
        for agg in member.aggregators:
            frame = spark_frame_of(agg)
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
            state = agg.spark_state(F.col("event_time"))
            name = f"{prefix}{state_column(agg.out)}"
            if state is None:
                columns.append(F.lit(None).cast("binary").alias(name))
            else:
                states.append(state.alias(name))
    result = rows.groupBy(*keys).agg(*columns)
    if states:
        # A pass of their own: beside a distinct aggregate (count_distinct), Spark 4.3's
        # rewrite of distinct aggregations gave hll_sketch_agg a sketch of part of the
        # group's values (tests/pipelines/batch/test_aggregation_engines.py).
        frames.append(rows.groupBy(*keys).agg(*states))
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
        if validate_rows is not None:
            validate_rows(table, member)
        tables.append(table.sort_by([(name, "ascending") for name in keys]))
    return tables


def correct_window_hours(
    spark: SparkSession,
    store: ObjectStore,
    target: TableTarget,
    views: Sequence[View],
    wanted: list[int],
    s3_scheme: str,
    emit: Callable[[CorrectionResult], None],
    validate_segment: Callable[[DataFrame, View], None] | None,
    validate_rows: Callable[[pa.Table, View], None] | None = None,
) -> dict[tuple[str, int], tuple[int, int]]:
    """Steps 1-4 of :func:`pipelines.batch.correct.correct_hours` for the windowed views;
    returns (events, duplicates dropped) per (topic, hour) of the archive it read."""
    plan = {view.name: _segments_to_correct(target.tables, view, wanted) for view in views}
    by_name = {view.name: view for view in views}
    needed = sorted(
        {h for name, segs in plan.items() for s in segs for h in segment_hours(by_name[name], s)}
    )
    listed = list_hour_files(store, needed)
    files = {view.topic: topic_files(listed, view.topic) for view in views}
    todo: dict[str, list[int]] = {}
    for view in views:
        for segment in plan[view.name]:
            if any(h in files[view.topic] for h in segment_hours(view, segment)):
                todo.setdefault(view.name, []).append(segment)
                continue
            labels = [hour_label(h) for h in segment_hours(view, segment)]
            reason = f"no archived events for hour(s) {', '.join(labels)}"
            emit(CorrectionResult.skipped_for(view.name, segment, reason))
    if not todo:
        return {}
    topics = sorted({by_name[name].topic for name in todo})
    read = _all_of({topic: files[topic] for topic in topics})
    fit_shuffle_partitions(spark, archive_bytes(store, read))  # for the sessions too
    counts: dict[tuple[str, int], tuple[int, int]] = defaultdict(lambda: (0, 0))
    for topic in topics:
        members = [v for v in views if v.name in todo and v.topic == topic]
        _correct_topic(
            spark,
            store,
            target,
            members,
            todo,
            listed,
            files[topic],
            s3_scheme,
            counts,
            emit,
            validate_segment,
            validate_rows,
        )
    return dict(counts)


def _all_of(files: dict[str, dict[int, list[str]]]) -> dict[int, list[str]]:
    """Every topic's files of a listing, by hour."""
    merged: dict[int, list[str]] = defaultdict(list)
    for of_topic in files.values():
        for hour, keys in of_topic.items():
            merged[hour] += keys
    return dict(merged)


def _correct_topic(
    spark: SparkSession,
    store: ObjectStore,
    target: TableTarget,
    views: Sequence[View],
    todo: dict[str, list[int]],
    listed: dict[int, list[str]],
    files: dict[int, list[str]],
    s3_scheme: str,
    counts: dict[tuple[str, int], tuple[int, int]],
    emit: Callable[[CorrectionResult], None],
    validate_segment: Callable[[DataFrame, View], None] | None,
    validate_rows: Callable[[pa.Table, View], None] | None,
) -> None:
    """Steps 2-4 for the views of one topic, whose archive they read with its declaration."""
    # 2. One read of every needed hour, deduplicated and cached for all the topic's views.
    started = time.monotonic()
    declaration = declaration_of(views[0])
    # Cache only the columns the views read: building Spark's columnar cache is the most
    # expensive step after deduplication, and an id (unique strings) rarely is one.
    used = {c for view in views for c in _columns_read(view)}
    keep = ["topic", "event_time", COPIES, HOUR, *sorted(used - {"topic", "event_time"})]
    events = (
        read_hours(spark, store, listed, s3_scheme, declaration)
        .select(*keep)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        stats = events.groupBy("topic", HOUR).agg(
            F.count(F.lit(1)).alias("events"), F.sum(COPIES).alias("copies")
        )
        for row in stats.collect():
            counts[(row["topic"], row[HOUR])] = (row["events"], row["copies"] - row["events"])
        of_topic = [c for (t, _), c in counts.items() if t == declaration.topic]
        log.info(
            "%s: read %d file(s) of %d hour(s): %d events, %d duplicates dropped, in %.1fs",
            declaration.topic,
            sum(len(keys) for keys in files.values()),
            len(files),
            sum(c[0] for c in of_topic),
            sum(c[1] for c in of_topic),
            time.monotonic() - started,
        )
        groups: dict[tuple, list[View]] = defaultdict(list)
        for view in views:
            groups[(_aggregation_key(view), tuple(todo[view.name]))].append(view)
        for (_, segments), members in groups.items():
            group_started = time.monotonic()
            tables = aggregate_window_views(  # 3
                events, members, segments, validate_segment, validate_rows
            )
            share = (time.monotonic() - group_started) / (len(segments) * len(members))
            for view, table in zip(members, tables, strict=True):
                _publish_view(target, view, segments, table, share, files, counts, emit)
    finally:
        # Not to hide why the run failed: a lost Spark Connect server fails this too.
        with contextlib.suppress(Exception):
            events.unpersist()


def _publish_view(
    target: TableTarget,
    view: View,
    segments: Sequence[int],
    table: pa.Table,
    share: float,
    files: dict[int, list[str]],
    counts: dict[tuple[str, int], tuple[int, int]],
    emit: Callable[[CorrectionResult], None],
) -> None:
    """Publish each segment's rows of ``table`` (step 4, one commit) and report them."""
    write_started = time.monotonic()
    starts = table.column(WINDOW_START).to_numpy()
    parts, missing_of = [], {}
    for segment in segments:
        in_segment = (starts >= segment) & (starts < segment + view.segment_ms)
        seg_hours = segment_hours(view, segment)
        read = [hour_label(h) for h in seg_hours if h in files]
        missing = tuple(hour_label(h) for h in seg_hours if h not in files)
        own = seg_hours[: view.segment_ms // HOUR_MS]  # not the hours sliding windows reach
        if missing:
            log.warning(
                "%s %s: no archive for hour(s) %s; publishing what the others hold",
                view.name,
                hour_label(segment),
                ", ".join(missing),
            )
        missing_of[segment] = missing
        parts.append(
            SegmentRows(
                segment,
                table.filter(pa.array(in_segment)),
                sum(counts[(view.topic, h)][0] for h in own),
                sum(counts[(view.topic, h)][1] for h in own),
                read,
            )
        )
    published = publish_versions(target, view, parts)  # 4
    write_share = (time.monotonic() - write_started) / max(1, len(parts))
    for part, (version, keys) in zip(parts, published, strict=True):
        log.info(
            "%s %s: published batch v%d, %d rows from %d events (%d duplicates)",
            view.name,
            hour_label(part.segment),
            version,
            part.table.num_rows,
            part.events,
            part.duplicates,
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
                hours=tuple(part.hours),
                hours_missing=missing_of[part.segment],
            )
        )
