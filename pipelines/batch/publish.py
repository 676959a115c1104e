"""Publishing a correction: the next batch version of a segment, file first, manifest last."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa

from pipelines.segments import (
    PublishedManifest,
    batch_prefix,
    hour_label,
    read_manifest,
    to_parquet,
    write_manifest,
)
from pipelines.storage import ObjectStore
from pipelines.views.model import View

__all__ = ["PART_FILE", "CorrectionResult", "publish_version"]

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


def publish_version(
    store: ObjectStore,
    view: View,
    segment: int,
    table: pa.Table,
    events: int,
    duplicates: int,
    hours: list[str],
) -> tuple[int, list[str]]:
    """Write the next version's file, then, last, its manifest; returns (version, files)."""
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
