"""Keeping the views' tables healthy: expire old snapshots, remove files nothing references,
and say how many data files each hour has.

Every Sluice commit replaces whole hours with one file per hour, so an hour never
accumulates small data files (a correction or a publish rewrites it whole: that is the
compaction); what accumulates is history: a snapshot per commit (a realtime publish every
``SLUICE_PUBLISH_INTERVAL_S``), its manifest list and manifests, and the files of replaced
hours that old snapshots still reference. :func:`expire_snapshots` drops snapshots older
than the retention (time travel reaches back that far, no further), then
:func:`remove_orphan_files` deletes every file under the table's location that no remaining
snapshot or metadata file references and that is older than a grace period (a commit under
way has written files it has not committed yet).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlparse

from pyarrow.fs import FileSelector, FileType
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from pipelines.segments import HOUR_MS
from pipelines.tables.catalog import ViewTables
from pipelines.tables.schema import partition_field
from pipelines.views.model import View

__all__ = [
    "MaintenanceReport",
    "expirable",
    "expire_snapshots",
    "files_per_hour",
    "maintain",
    "referenced_files",
    "remove_orphan_files",
    "table_files",
]

log = logging.getLogger(__name__)

ORPHAN_GRACE_MS = HOUR_MS
"""A file younger than this is never an orphan: a commit may still be about to reference it."""


@dataclass(frozen=True)
class MaintenanceReport:
    view: str
    snapshots_expired: int
    snapshots_kept: int
    files_removed: int
    bytes_removed: int
    files_left: int
    data_files: int
    max_files_per_hour: int


def expirable(
    table: Table, now_ms: int, retention_ms: int, realtime_retention_ms: int
) -> list[int]:
    """Snapshots to expire: every one older than ``retention_ms``; and, older than
    ``realtime_retention_ms``, the realtime publishes except the last of each hour and the
    parent of each correction (what an hour said before it was corrected). Never the current.

    A publish every 30 s is 2,880 snapshots a day, and pyiceberg copies the whole metadata
    (every snapshot) several times per commit: keeping them all made each commit slower.
    """
    current = table.current_snapshot()
    snapshots = table.snapshots()
    keep_parents = {s.parent_snapshot_id for s in snapshots if _source(s) == "batch"}
    last_of_hour: dict[int, tuple[int, int]] = {}
    for s in snapshots:
        hour = s.timestamp_ms - s.timestamp_ms % HOUR_MS
        if hour not in last_of_hour or s.timestamp_ms >= last_of_hour[hour][0]:
            last_of_hour[hour] = (s.timestamp_ms, s.snapshot_id)
    hourly = {sid for _, sid in last_of_hour.values()}
    out = []
    for s in snapshots:
        if current is not None and s.snapshot_id == current.snapshot_id:
            continue
        age = now_ms - s.timestamp_ms
        source = _source(s)
        if age > retention_ms or (
            age > realtime_retention_ms
            and source != "batch"
            and s.snapshot_id not in keep_parents
            and s.snapshot_id not in hourly
        ):
            out.append(s.snapshot_id)
    return out


def _source(snapshot: Snapshot) -> str | None:
    return snapshot.summary.get("sluice.source") if snapshot.summary else None


def expire_snapshots(
    tables: ViewTables,
    view: View,
    now_ms: int,
    retention_ms: int,
    realtime_retention_ms: int | None = None,
) -> int:
    """Expire :func:`expirable` snapshots; how many (one metadata commit, retried)."""
    realtime_retention_ms = retention_ms if realtime_retention_ms is None else realtime_retention_ms
    for _ in range(10):
        table = tables.load(view)
        ids = expirable(table, now_ms, retention_ms, realtime_retention_ms)
        if not ids:
            return 0
        try:
            table.maintenance.expire_snapshots().by_ids(ids).commit()
            return len(ids)
        except CommitFailedException:
            continue  # a publish landed meanwhile: decide again on the new snapshot
    return 0


def _path(uri: str) -> str:
    """A file's path without scheme, as a filesystem listing spells it."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a", "gs", "abfs"):
        return f"{parsed.netloc}{parsed.path}"
    return parsed.path if parsed.scheme == "file" else uri


def referenced_files(table: Table) -> set[str]:
    """Every file a snapshot or the metadata still names (data, manifests, lists, metadata)."""
    names = {table.metadata_location}
    names.update(entry.metadata_file for entry in table.metadata.metadata_log)
    manifests_seen: set[str] = set()
    for snapshot in table.snapshots():
        names.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            names.add(manifest.manifest_path)
            if manifest.manifest_path in manifests_seen:
                continue
            manifests_seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                names.add(entry.data_file.file_path)
    for stats in table.metadata.statistics:
        names.add(stats.statistics_path)
    return {_path(n) for n in names}


def table_files(table: Table) -> list[tuple[str, int, int]]:
    """(path, bytes, mtime ms) of every file under the table's location."""
    uri = table.location()
    parsed = urlparse(uri)
    scheme = parsed.scheme or "file"
    fs = table.io.fs_by_scheme(scheme, parsed.netloc)  # type: ignore[attr-defined]
    base = _path(uri)
    try:
        infos = fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return []
    return [
        (i.path, i.size or 0, int(i.mtime.timestamp() * 1000) if i.mtime else 0)
        for i in infos
        if i.type == FileType.File
    ]


def remove_orphan_files(
    tables: ViewTables, view: View, now_ms: int | None = None, grace_ms: int = ORPHAN_GRACE_MS
) -> tuple[int, int, int]:
    """Delete the table's unreferenced files older than ``grace_ms``; (files, bytes, left)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    table = tables.load(view)
    keep = referenced_files(table)
    removed = freed = left = 0
    for path, size, mtime in table_files(table):
        if path in keep or _path(path) in keep or mtime > now_ms - grace_ms:
            left += 1
            continue
        try:
            table.io.delete(path if "://" not in table.location() else _rescheme(table, path))
        except FileNotFoundError:
            continue
        removed += 1
        freed += size
    return removed, freed, left


def _rescheme(table: Table, path: str) -> str:
    return f"{urlparse(table.location()).scheme}://{path}"


def files_per_hour(table: Table, view: View) -> Counter[int]:
    """Hour -> live data files in the current snapshot."""
    counts: Counter[int] = Counter()
    if table.current_snapshot() is None:
        return counts
    col = partition_field(view)
    field = next(
        f for f in table.spec().fields if table.schema().find_field(f.source_id).name == col
    )
    for task in table.scan().plan_files():
        hours_since_epoch = task.file.partition[table.spec().fields.index(field)]
        counts[int(hours_since_epoch) * HOUR_MS] += 1
    return counts


def maintain(
    tables: ViewTables,
    view: View,
    retention_ms: int,
    realtime_retention_ms: int | None = None,
    now_ms: int | None = None,
    grace_ms: int = ORPHAN_GRACE_MS,
) -> MaintenanceReport:
    """Expire what is older than the retentions, then remove the orphans; what it did."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    expired = expire_snapshots(tables, view, now_ms, retention_ms, realtime_retention_ms)
    removed, freed, left = remove_orphan_files(tables, view, now_ms, grace_ms)
    table = tables.load(view)
    per_hour = files_per_hour(table, view)
    report = MaintenanceReport(
        view.name,
        expired,
        len(table.snapshots()),
        removed,
        freed,
        left,
        sum(per_hour.values()),
        max(per_hour.values(), default=0),
    )
    log.info("tables maintenance: %s", report)
    return report
