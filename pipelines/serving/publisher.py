"""The realtime publisher: the stream's partial states, merged, into the views' tables.

The per-task partial states stay the stream's crash-safe working format. One publisher per fleet
(the agent holding the coordinator lease runs it, :mod:`orchestration.control_plane.fleet.agent`)
reads each view's realtime files, and for every segment a task's flush rewrote since its last
pass merges them (as the query did) and commits those hours, one snapshot per view and pass, at
most every ``SLUICE_PUBLISH_INTERVAL_S``. An hour the batch has corrected is never replaced:
:func:`pipelines.tables.replace_hours` checks it on the snapshot it commits on, and the publisher
stops looking at that hour.

Which segments: every segment with realtime files on the first pass (and the first after a
view's definition changed); then those the change log names (:mod:`pipelines.segments.changes`:
every flush records the segments it rewrote, with the task and its generation). A task that
lags by days, restarts from its checkpoint or fills an old hour late is published like any
other: what it wrote, not where the newest hour is, decides. The records a pass listed are
deleted once its commit succeeded; a failed pass leaves them for the next. A file's content,
not its record, says whether it changed (a replay after a crash rewrites identical files:
nothing to commit). Files are read through :func:`pipelines.segments.read_realtime`, so a pass
never commits a split's or merge's moved rows twice: a view whose rewrite does not settle within
``read_wait_s`` is left, change records and all, to the next pass. A leader's commits carry its
lease term (``term``): a former leader's commit after a newer leader's is refused
(:class:`pipelines.tables.PublisherFenced`), its records left to the new leader.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipelines.config import SluiceSettings
from pipelines.segments import (
    HOUR_MS,
    RewriteUnsettled,
    change_records,
    read_parquet,
    read_realtime,
)
from pipelines.serving.query import realtime_table
from pipelines.storage import ObjectStore
from pipelines.tables import (
    REALTIME,
    PublisherFenced,
    TableBusyError,
    ViewTables,
    replace_hours,
    table_rows,
)
from pipelines.tables.maintenance import expire_snapshots
from pipelines.views.model import WINDOW_END, View

__all__ = ["PublishPass", "RealtimePublisher"]

log = logging.getLogger(__name__)

EXPIRE_EVERY_S = 600.0


@dataclass
class PublishPass:
    """What one pass did."""

    committed: dict[str, list[int]] = field(default_factory=dict)
    """View -> hours committed."""
    skipped: dict[str, list[int]] = field(default_factory=dict)
    """View -> hours left alone because the batch corrected them."""
    snapshots: dict[str, int] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)
    """Views left for the next pass: a correction held the table's next commit."""
    expired: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0


class RealtimePublisher:
    def __init__(
        self,
        store: ObjectStore,
        tables: ViewTables,
        views: Callable[[], Sequence[View]] | Sequence[View],
        interval_s: float = 5.0,
        retention_ms: int = 72 * HOUR_MS,
        realtime_retention_ms: int = HOUR_MS,
        expire_every_s: float = EXPIRE_EVERY_S,
        leading: Callable[[], bool] | None = None,
        read_wait_s: float = 5.0,
        term: Callable[[], int | None] | None = None,
    ) -> None:
        self.store = store
        self.tables = tables
        self.views = views if callable(views) else (lambda: views)
        self.interval_s = interval_s
        self.scanned: set[tuple[str, str]] = set()
        """(view, fingerprint) whose every segment a pass has looked at."""
        self.digests: dict[tuple[str, str, int], str] = {}
        """(view, fingerprint, segment) -> digest of the realtime files last committed."""
        self.corrected: set[tuple[str, int]] = set()
        self.next_pass = 0.0
        self.retention_ms = retention_ms
        self.realtime_retention_ms = realtime_retention_ms
        self.expire_every_s = expire_every_s
        self.next_expiry = time.monotonic() + expire_every_s
        self.leading = leading
        """Asked just before each commit: False once another agent leads (a former leader's
        pass, paused and resumed, then commits nothing and leaves the records)."""
        self.term = term
        """The coordinator lease term the commits carry: a commit under a lower term than one
        that committed is refused (the gap between ``leading`` and the commit); None, or
        returning None: unfenced (a publisher without a lease)."""
        self.read_wait_s = read_wait_s
        """How long a pass's read of a view waits out a split or merge before it skips the
        view until the next pass."""

    @classmethod
    def from_settings(
        cls,
        store: ObjectStore,
        tables: ViewTables,
        views: Callable[[], Sequence[View]] | Sequence[View],
        settings: SluiceSettings,
        **options: Any,
    ) -> RealtimePublisher:
        """At the settings' interval and snapshot retentions (``options``: the other
        arguments): the fleet leader's publisher and ``sluice tables publish``'s."""
        return cls(
            store,
            tables,
            views,
            settings.publish_interval_s,
            retention_ms=int(settings.tables_snapshot_retention_h * HOUR_MS),
            realtime_retention_ms=int(settings.tables_realtime_snapshot_retention_m * 60_000),
            **options,
        )

    def due(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.next_pass

    def publish_once(self) -> PublishPass:
        started, cpu = time.monotonic(), time.thread_time()
        self.next_pass = started + self.interval_s
        result = PublishPass()
        for view in self.views():
            if view.disabled:
                continue
            try:
                self._publish_view(view, result)
            except Exception:  # one view's failure must not stop the others' publishing
                log.exception("publishing %s's realtime hours failed; retried next pass", view.name)
        if time.monotonic() >= self.next_expiry:
            self.next_expiry = time.monotonic() + self.expire_every_s
            self._expire(result)
        result.seconds = time.monotonic() - started
        result.cpu_seconds = time.thread_time() - cpu
        if result.committed:
            log.info(
                "published %s in %.2f s",
                ", ".join(f"{v}: {len(h)} hour(s)" for v, h in result.committed.items()),
                result.seconds,
            )
        return result

    def _expire(self, result: PublishPass) -> None:
        """Drop the realtime snapshots past their retention (metadata only; the maintenance
        job removes the files)."""
        now_ms = int(time.time() * 1000)
        for view in self.views():
            if view.disabled or self.tables.find(view.name) is None:
                continue
            try:
                result.expired[view.name] = expire_snapshots(
                    self.tables, view, now_ms, self.retention_ms, self.realtime_retention_ms
                )
            except Exception:
                log.exception("expiring %s's snapshots failed; retried later", view.name)

    def _segments(self, view: View, named: set[int]) -> dict[int, list[tuple[str, bytes]]]:
        """Segment start -> its realtime files (key, bytes), for the segments worth looking
        at: all of them on the view's first pass, else those the change log names. Read in
        one :func:`~pipelines.segments.read_realtime`: a split or merge under way is seen
        whole or not at all (:class:`RewriteUnsettled` past ``read_wait_s``)."""
        if (view.name, view.fingerprint) not in self.scanned:
            found = read_realtime(self.store, view.name, wait_s=self.read_wait_s)
        else:
            found = read_realtime(self.store, view.name, named, wait_s=self.read_wait_s)
        return {s: files for s, files in found.items() if (view.name, s) not in self.corrected}

    def _publish_view(self, view: View, result: PublishPass) -> None:
        records = change_records(self.store, view.name)
        named = {s for r in records for s in r.segments}
        changed: dict[int, tuple[str, list[pa.Table]]] = {}
        try:
            segments = self._segments(view, named)
        except RewriteUnsettled as exc:  # its hours stay in the change log for the next pass
            log.info("%s: %s; published at the next pass", view.name, exc)
            result.deferred.append(view.name)
            return
        for segment, blobs in sorted(segments.items()):
            if not blobs:
                continue
            digest = hashlib.blake2b(digest_size=16)
            for key, data in blobs:
                digest.update(key.encode())
                digest.update(data)
            text = digest.hexdigest()
            if self.digests.get((view.name, view.fingerprint, segment)) == text:
                continue
            changed[segment] = (text, [read_parquet(data) for _, data in blobs])
        if changed and self.leading is not None and not self.leading():
            log.info("%s: another agent leads now; its publisher commits this", view.name)
            result.deferred.append(view.name)
            return
        if changed:
            try:
                self._commit(view, changed, result)
            except TableBusyError:  # a correction goes first; its records wait for the next pass
                log.info("%s: a correction holds the table; published at the next pass", view.name)
                result.deferred.append(view.name)
                return
            except PublisherFenced as exc:  # a newer leader publishes; the records are its
                log.warning("%s", exc)
                result.deferred.append(view.name)
                return
        self.scanned.add((view.name, view.fingerprint))
        for record in records:  # published (or unchanged): consumed
            self.store.delete(record.key)

    def _commit(
        self, view: View, changed: dict[int, tuple[str, list[pa.Table]]], result: PublishPass
    ) -> None:
        segments = [files for _, files in changed.values()]
        merged = realtime_table(view, segments, _row_schema(view))
        data = table_rows(view, merged, REALTIME, 0)
        hours = [h for s in changed for h in range(s, s + view.segment_ms, HOUR_MS)]
        term = self.term() if self.term is not None else None
        outcome = replace_hours(self.tables, view, hours, data, source=REALTIME, term=term)
        for segment, (text, _) in changed.items():
            self.digests[(view.name, view.fingerprint, segment)] = text
        for hour in outcome.skipped:
            self.corrected.add((view.name, view.segment_start(hour)))
        if outcome.hours:
            result.committed[view.name] = list(outcome.hours)
            if outcome.snapshot_id is not None:
                result.snapshots[view.name] = outcome.snapshot_id
        if outcome.skipped:
            result.skipped[view.name] = list(outcome.skipped)


def _row_schema(view: View) -> pa.Schema:
    """The merged rows' columns: the output columns with times in epoch ms, no window end."""
    fields = []
    for f in view.output_schema():
        if f.name == WINDOW_END:
            continue
        fields.append(pa.field(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f)
    return pa.schema(fields)
