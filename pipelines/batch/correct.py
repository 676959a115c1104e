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

from collections.abc import Callable, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pipelines.batch.archive import archive_hours, check_hours
from pipelines.batch.publish import CorrectionResult, TableTarget, publishing_to
from pipelines.batch.spark import shuffle_partitions_kept
from pipelines.batch.windows import batch_schema, segment_hours
from pipelines.kinds import CorrectionRun, by_kind
from pipelines.storage import ObjectStore
from pipelines.tables import ViewTables
from pipelines.views.model import View

__all__ = [
    "CorrectionResult",
    "archive_hours",
    "batch_schema",
    "correct_hours",
    "segment_hours",
]


def correct_hours(
    spark: SparkSession,
    store: ObjectStore,
    views: Sequence[View],
    hours: Sequence[int],
    *,
    s3_scheme: str = "s3a",
    on_result: Callable[[CorrectionResult], None] | None = None,
    validate_segment: Callable[[DataFrame, View], None] | None = None,
    validate_rows: Callable[[pa.Table, View], None] | None = None,
    tables: ViewTables | None = None,
    run_id: str = "",
) -> list[CorrectionResult]:
    """Correct every segment of every view that covers one of ``hours`` (epoch-ms hour starts).

    Returns one result per (view, segment), in view order then time order; segments whose
    hours have no archive are skipped with a warning, not published. ``on_result`` is
    called as each result is ready (progress display). ``validate_segment(frame, view)`` checks
    each view's rows before they are published and raises to stop the correction (the data
    plane stays free of the quality layer: callers pass ``quality.schemas``' validator).
    ``validate_rows(table, view)`` does the same on the collected Arrow rows, in the driver:
    no Spark job and no round trip to a Spark Connect server per view.

    With ``tables``, each view's segments are one commit to its Iceberg table (``run_id`` in
    the snapshot summary); without, the older ``batch/v<N>/`` + ``_published.json`` layout.

    Each kind of view corrects its own views (:meth:`pipelines.kinds.ViewKind.correct`):
    windowed views by :func:`pipelines.batch.windows.correct_window_hours`, session views by
    :func:`pipelines.batch.sessions.correct_session_hours` (their segments are the hours
    sessions started in; ``validate_segment`` is not applied).
    """
    wanted = check_hours(hours)
    order = {view.name: i for i, view in enumerate(views)}
    results: list[CorrectionResult] = []

    def emit(result: CorrectionResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    target = TableTarget(tables, run_id) if tables is not None else None
    run = CorrectionRun(s3_scheme, emit, validate_segment, validate_rows)
    with publishing_to(target), shuffle_partitions_kept(spark):
        for kind, of_kind in by_kind(views).items():
            kind.correct(spark, store, of_kind, wanted, run)
    results.sort(key=lambda r: (order[r.view], r.segment_start_ms))
    return results
