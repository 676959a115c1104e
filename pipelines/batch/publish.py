"""Publishing a correction: the next batch version of a segment.

Into the view's Iceberg table when the correction runs :func:`publishing_to` a
:class:`~pipelines.tables.ViewTables` (the CLI, Dagster): the segment's rows are written as
Parquet, one file per hour, and one commit per view deletes its segments' hours and adds the
files, with the batch version, the run id and the archive hours read in the snapshot summary
(:func:`pipelines.tables.replace_segments`, retried on conflicts). Without tables (library calls),
the older layout: ``batch/v<N>/`` file first, ``_published.json`` last.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from pipelines.segments import (
    HOUR_MS,
    PublishedManifest,
    batch_prefix,
    hour_label,
    read_manifest,
    to_parquet,
    write_manifest,
)
from pipelines.storage import ObjectStore
from pipelines.tables import (
    BATCH,
    ViewTables,
    batch_hours,
    replace_segments,
    table_rows,
)
from pipelines.views.model import View

__all__ = [
    "PART_FILE",
    "CorrectionResult",
    "SegmentRows",
    "TableTarget",
    "is_corrected",
    "publish_version",
    "publish_versions",
    "publishing_to",
]

log = logging.getLogger(__name__)

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

    tables: ViewTables
    run_id: str = ""


_target: contextvars.ContextVar[TableTarget | None] = contextvars.ContextVar(
    "sluice_publish_target", default=None
)


@contextmanager
def publishing_to(target: TableTarget | None) -> Iterator[None]:
    """Publish the corrections made inside the block to ``target`` (None: the older layout)."""
    token = _target.set(target)
    try:
        yield
    finally:
        _target.reset(token)


def is_corrected(store: ObjectStore, view: View, segment: int) -> bool:
    """Whether a correction of ``segment`` was published where this one publishes (the
    view's table, or the older layout's manifest)."""
    target = _target.get()
    if target is None:
        return read_manifest(store, view.name, segment) is not None
    table = target.tables.find(view.name)
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
    store: ObjectStore, view: View, parts: Sequence[SegmentRows]
) -> list[tuple[int, list[str]]]:
    """Publish each segment's rows as its next batch version; (version, files) per segment.

    To a view's table, every segment in one commit (a day's correction was 24 commits of
    about 0.1 s each, each re-reading the table's metadata); all or none of them, so a failed
    run leaves no day half-corrected."""
    target = _target.get()
    if target is None or not parts:
        return [
            publish_version(store, view, p.segment, p.table, p.events, p.duplicates, p.hours)
            for p in parts
        ]
    return _commit_versions(target, view, parts)


def publish_version(
    store: ObjectStore,
    view: View,
    segment: int,
    table: pa.Table,
    events: int,
    duplicates: int,
    hours: list[str],
) -> tuple[int, list[str]]:
    """Publish the segment's rows as its next batch version; returns (version, files)."""
    target = _target.get()
    if target is not None:
        return _commit_versions(
            target, view, [SegmentRows(segment, table, events, duplicates, hours)]
        )[0]
    current = read_manifest(store, view.name, segment)
    version = current.version + 1 if current else 1
    key = f"{batch_prefix(view.name, segment, version)}{PART_FILE}"
    store.put(key, to_parquet(table))
    manifest = PublishedManifest(
        version=version,
        files=(key,),
        created_at=int(time.time()),
        events=events,
        duplicates_dropped=duplicates,
        hours=tuple(hours),
    )
    write_manifest(store, view.name, segment, manifest)
    return version, [key]


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
