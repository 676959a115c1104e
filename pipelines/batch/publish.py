"""Publishing a correction: the next batch version of a segment, into the view's Iceberg table.

The segment's rows are written as Parquet, one file per hour, and one commit per view deletes
its segments' hours and adds the files, with the batch version, the run id and the archive
hours read in the snapshot summary (:func:`pipelines.tables.replace_segments`, retried on
conflicts). Where: the :class:`TableTarget` the correction is handed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from pipelines.segments import HOUR_MS, hour_label
from pipelines.tables import BATCH, Tables, batch_hours, replace_segments, table_rows
from pipelines.views.model import View

__all__ = [
    "CorrectionResult",
    "SegmentRows",
    "TableTarget",
    "is_corrected",
    "publish_version",
    "publish_versions",
]

log = logging.getLogger(__name__)


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

    @classmethod
    def skipped_for(cls, view: str, segment: int, reason: str) -> CorrectionResult:
        """A segment not corrected (and not published: an empty version would hide the
        realtime values), with why; logged as a warning."""
        log.warning("%s %s: skipped, %s", view, hour_label(segment), reason)
        return cls(view, segment, 0, 0, 0, 0, (), 0.0, True, reason)

    @property
    def segment(self) -> str:
        return hour_label(self.segment_start_ms)


@dataclass(frozen=True)
class TableTarget:
    """Where a correction publishes: the views' tables, and the run to name in snapshots."""

    tables: Tables
    run_id: str = ""


def is_corrected(tables: Tables, view: View, segment: int) -> bool:
    """Whether a correction of ``segment`` was published to the view's table."""
    table = tables.find(view.name)
    hours = range(segment, segment + view.segment_ms, HOUR_MS)
    return table is not None and bool(batch_hours(table, view, hours))


@dataclass(frozen=True)
class SegmentRows:
    """One segment's corrected rows, ready to publish."""

    segment: int
    table: pa.Table
    events: int
    duplicates: int
    hours: list[str]
    """Labels of the archive hours read for it."""


def publish_versions(
    target: TableTarget, view: View, parts: Sequence[SegmentRows]
) -> list[tuple[int, list[str]]]:
    """Publish each segment's rows as its next batch version; (version, files) per segment.

    Every segment in one commit (a commit per segment would re-read the table's metadata
    each time); all or none of them, so a failed run leaves no day half-corrected."""
    if not parts:
        return []
    return _commit_versions(target, view, parts)


def publish_version(
    target: TableTarget,
    view: View,
    segment: int,
    table: pa.Table,
    events: int,
    duplicates: int,
    hours: list[str],
) -> tuple[int, list[str]]:
    """Publish the segment's rows as its next batch version; returns (version, files)."""
    return _commit_versions(target, view, [SegmentRows(segment, table, events, duplicates, hours)])[
        0
    ]


def _commit_versions(
    target: TableTarget, view: View, parts: Sequence[SegmentRows]
) -> list[tuple[int, list[str]]]:
    """One commit replacing every segment's hours with its rows (one file per hour)."""
    segments = [list(range(p.segment, p.segment + view.segment_ms, HOUR_MS)) for p in parts]

    def rows(versions: list[int]) -> pa.Table:
        made = [table_rows(view, p.table, BATCH, v) for p, v in zip(parts, versions, strict=True)]
        return pa.concat_tables(made)

    outcome = replace_segments(
        target.tables,
        view,
        segments,
        rows,
        summary={
            "run-id": target.run_id,
            "events": str(sum(p.events for p in parts)),
            "duplicates-dropped": str(sum(p.duplicates for p in parts)),
            "archive-hours": ",".join(dict.fromkeys(h for p in parts for h in p.hours)),
        },
    )
    return [
        (version, [outcome.file_of_hour[h] for h in hours if h in outcome.file_of_hour])
        for version, hours in zip(outcome.versions, segments, strict=True)
    ]
