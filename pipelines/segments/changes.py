"""The change log: which realtime segments a task's flush rewrote, for the publisher to commit.

Every flush that rewrites realtime files then writes one small record per view::

    changes/<view>/<at ms>-<topic>-<task label>-g<generation>-<nonce>.json

holding the segments it rewrote, the task and its generation. The publisher lists a view's
records, commits the segments they name, then deletes the records it listed. A record is
written after its files, so a pass that lists a record reads files at least as new as the flush
it names; a record written during the pass survives to the next one. The log lives in the
object store, not the control store, so it works alike for the local (SQLite) and PostgreSQL
setups and for a stream worker with no control store at all. The oldest record's time is the
view's table lag: the oldest change not yet published.

A task keeps at most one record per view (:class:`ChangeLog`): while its last record is still
there (no publisher took it yet), the next flush writes one record of both flushes' segments,
dated by the older, then deletes the last. A fleet without a publisher (``sluice stream``
alone) thus holds one record per view and task, not one per flush.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from pipelines.segments.layout import task_label
from pipelines.storage import ObjectStore

__all__ = [
    "CHANGES_PREFIX",
    "ChangeLog",
    "ChangeRecord",
    "change_records",
    "changes_prefix",
    "oldest_change_ms",
    "record_change",
    "table_lag_s",
]

CHANGES_PREFIX = "changes/"


def changes_prefix(view: str) -> str:
    return f"{CHANGES_PREFIX}{view}/"


@dataclass(frozen=True)
class ChangeRecord:
    key: str
    at_ms: int
    """When the flush wrote its files (wall clock)."""
    task: str
    generation: int
    segments: tuple[int, ...]


def record_change(
    store: ObjectStore,
    view: str,
    segments: Iterable[int],
    topic: str,
    partition: int,
    generation: int,
    bucket: int = 0,
    factor: int = 1,
    at_ms: int | None = None,
) -> str:
    """Record that a flush rewrote ``segments`` of ``view``; the record's key."""
    at = int(time.time() * 1000) if at_ms is None else at_ms
    label = task_label(partition, bucket, factor)
    key = (
        f"{changes_prefix(view)}{at:013d}-{topic}-{label}-g{generation}-{uuid.uuid4().hex[:8]}.json"
    )
    body = {
        "task": f"{topic}-{label}",
        "generation": generation,
        "at_ms": at,
        "segments": sorted(set(segments)),
    }
    store.put(key, json.dumps(body).encode())
    return key


def _at_ms(key: str) -> int | None:
    head = key.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def change_records(store: ObjectStore, view: str) -> list[ChangeRecord]:
    """The view's records, oldest first. A record that cannot be read (gone since the listing:
    another publisher consumed it; or not JSON) is skipped: the first is published, the second
    is deleted with the others (its segments are unknown, a full pass would cover them)."""
    records = []
    for key in sorted(store.list(changes_prefix(view))):
        at = _at_ms(key)
        try:
            body = json.loads(store.get(key))
            segments = tuple(int(s) for s in body["segments"])
            task, generation = str(body["task"]), int(body["generation"])
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, TypeError):
            segments, task, generation = (), "", 0
        records.append(ChangeRecord(key, at or 0, task, generation, segments))
    return records


def oldest_change_ms(store: ObjectStore, view: str) -> int | None:
    """When the oldest unpublished change of ``view`` was written, or None: from the listing
    only, so status and sensors read no record."""
    times = [t for key in store.list(changes_prefix(view)) if (t := _at_ms(key)) is not None]
    return min(times) if times else None


def table_lag_s(store: ObjectStore, view: str, now_s: float | None = None) -> float:
    """How long the oldest change of ``view`` not yet in its table has waited (0: none)."""
    oldest = oldest_change_ms(store, view)
    if oldest is None:
        return 0.0
    now = time.time() if now_s is None else now_s
    return max(0.0, now - oldest / 1000)


class ChangeLog:
    """One task's records: at most one per view (see the module's docstring)."""

    def __init__(
        self, store: ObjectStore, topic: str, partition: int, bucket: int = 0, factor: int = 1
    ) -> None:
        self.store = store
        self.where = (topic, partition)
        self.bucket, self.factor = bucket, factor
        self.last: dict[str, ChangeRecord] = {}

    def record(self, view: str, segments: Iterable[int], generation: int) -> str:
        """Record that a flush rewrote ``segments`` of ``view``; the record's key. The record
        is written before the last one is deleted, so every change stays in some record until
        a publisher that listed it has committed."""
        now = int(time.time() * 1000)
        at, merged = now, set(segments)
        prior = self.last.get(view)
        if prior is not None and self.store.exists(prior.key):
            at, merged = min(prior.at_ms, now), merged | set(prior.segments)
        topic, partition = self.where
        key = record_change(
            self.store, view, merged, topic, partition, generation, self.bucket, self.factor, at
        )
        if prior is not None:
            self.store.delete(prior.key)
        label = task_label(partition, self.bucket, self.factor)
        self.last[view] = ChangeRecord(
            key, at, f"{topic}-{label}", generation, tuple(sorted(merged))
        )
        return key
