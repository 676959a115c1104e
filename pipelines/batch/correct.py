"""The batch correction: recompute views exactly from the raw archive and publish a new version.

Stream workers drop events that come too late, count duplicates twice and answer distinct
counts and quantiles from sketches. The correction reads what the archive holds for whole
segments (late events included), drops duplicates by the topic's declared id (a topic without
one keeps every archived record), computes every aggregation exactly with the Spark
expressions of the aggregator registry and publishes the result as a batch version that replaces the realtime rows of the segment's hours in the view's table.

Per (view, segment), :func:`correct_hours`:

1. lists the archive files of the view's topic of every hour of the segment; no file at all
   means the segment is skipped, never published (an empty version would hide the realtime
   values);
2. reads the files of all segments of all views of a topic in one Spark read, with the
   topic's declared columns, drops duplicates and caches the result, so every view of the
   topic is computed from the same events;
3. aggregates the views that share a window and grouping in one pass (plus one two-stage
   pass per ``top_k``), collects the small result through Arrow and checks each view's
   rows with ``validate_segment`` if given (its error stops the run before anything of
   those views is published);
4. writes each segment's rows as Parquet, one file per hour, under the view's table, and
   commits every segment of the view in one snapshot: the segment's hours deleted, the
   files added, batch version N+1 (:mod:`pipelines.batch.publish`). Readers see all of a
   view's segments corrected or none.

The archive is immutable per hour once the stream has passed it, and the computation is
deterministic (sorted output, duplicates resolved by content), so a rerun publishes the
next version with identical values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pipelines.batch.archive import archive_hours, check_hours
from pipelines.batch.publish import CorrectionResult, TableTarget
from pipelines.batch.sessions import correct_session_hours
from pipelines.batch.spark import shuffle_partitions_kept
from pipelines.batch.windows import batch_schema, correct_window_hours, segment_hours
from pipelines.kinds import by_kind
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import SESSION, WINDOW, View

__all__ = [
    "CORRECTIONS",
    "CorrectionResult",
    "CorrectionRun",
    "KindCorrection",
    "archive_hours",
    "batch_schema",
    "correct_hours",
    "segment_hours",
]


@dataclass
class CorrectionRun:
    """What one :func:`correct_hours` call hands every kind's correction: where results go
    and what checks them, and what one kind's pass over the archive already counted for the
    next (events and duplicates per (topic, hour))."""

    target: TableTarget
    s3_scheme: str
    emit: Callable[[CorrectionResult], None]
    validate_segment: Callable[[DataFrame, View], None] | None = None
    validate_rows: Callable[[pa.Table, View], None] | None = None
    counted: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


class KindCorrection(Protocol):
    def __call__(
        self,
        spark: SparkSession,
        store: ObjectStore,
        views: Sequence[View],
        hours: list[int],
        run: CorrectionRun,
    ) -> None:
        """Recompute the segments of ``views`` (all of one kind) covering ``hours`` from the
        archive and publish them, one result each through ``run.emit``."""


def _correct_windows(
    spark: SparkSession,
    store: ObjectStore,
    views: Sequence[View],
    hours: list[int],
    run: CorrectionRun,
) -> None:
    run.counted.update(
        correct_window_hours(
            spark,
            store,
            run.target,
            views,
            hours,
            run.s3_scheme,
            run.emit,
            run.validate_segment,
            run.validate_rows,
        )
    )


def _correct_sessions(
    spark: SparkSession,
    store: ObjectStore,
    views: Sequence[View],
    hours: list[int],
    run: CorrectionRun,
) -> None:
    for view in views:
        correct_session_hours(
            spark,
            store,
            view,
            sorted({view.segment_start(h) for h in hours}),
            target=run.target,
            s3_scheme=run.s3_scheme,
            emit=run.emit,
            counted=run.counted,
        )


CORRECTIONS: dict[str, KindCorrection] = {WINDOW: _correct_windows, SESSION: _correct_sessions}
"""Every kind's correction, by the kind's name (:data:`pipelines.kinds.KINDS`); the kinds run
in that registry's order, so the windowed pass counts the archive for the session pass."""


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
    tables: Tables,
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

    Each view's segments are one commit to its table in ``tables`` (``run_id`` in the
    snapshot summary).

    Each kind of view corrects its own views (:data:`CORRECTIONS`, by the kind's name):
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

    run = CorrectionRun(
        TableTarget(tables, run_id), s3_scheme, emit, validate_segment, validate_rows
    )
    with shuffle_partitions_kept(spark):
        for kind, of_kind in by_kind(views).items():
            CORRECTIONS[kind.name](spark, store, of_kind, wanted, run)
    results.sort(key=lambda r: (order[r.view], r.segment_start_ms))
    return results
