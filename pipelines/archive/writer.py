"""The raw archive: every valid event in hourly Parquet partitions by event time.

A task archives what it consumed since its last flush as offset range ``[first, end)``.
File names derive from (partition, range), so a replay rewrites the same names, and on
restore a task removes ranges that start at or after its checkpoint (written after the last
checkpoint, they will be written again). One JSON record per range says what it holds, so
anyone can tell which offsets of which partitions an hour has.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow as pa

from pipelines.events.decode import DeadLetter, DecodedBatch
from pipelines.segments import (
    HOUR_MS,
    RangeRecord,
    archive_dead_letters_key,
    archive_events_key,
    archive_range_key,
    archive_ranges_prefix,
    hour_start,
    to_parquet,
)
from pipelines.storage import ObjectStore

__all__ = ["ARCHIVE_SCHEMA", "DEAD_LETTER_SCHEMA", "ArchiveBuffer"]

log = logging.getLogger(__name__)

ARCHIVE_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("event_time", pa.int64(), nullable=False),
        pa.field("org", pa.string(), nullable=False),
        pa.field("client", pa.string(), nullable=False),
        pa.field("bytes_tx", pa.int64(), nullable=False),
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("kafka_timestamp", pa.int64(), nullable=False),
    ]
)

DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("kafka_timestamp", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
    ]
)


class ArchiveBuffer:
    """Valid events and dead letters of one task since its last archive write."""

    def __init__(self, topic: str, partition: int, first_offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.first = first_offset
        self._batches: list[DecodedBatch] = []
        self._dead: list[DeadLetter] = []
        self._end = first_offset

    def add(self, batch: DecodedBatch) -> None:
        if len(batch):
            self._batches.append(batch)
        self._dead.extend(batch.dead_letters)
        if batch.next_offset > self._end:
            self._end = batch.next_offset

    def write(self, store: ObjectStore) -> RangeRecord | None:
        """Write the buffered range; the range record goes last, after its files."""
        if self._end <= self.first:
            return None
        first, end = self.first, self._end
        files: list[str] = []
        events: dict[str, int] = {}
        if self._batches:
            table = self._events_table()
            times = table.column("event_time").to_numpy()
            hours = times - times % HOUR_MS
            for hour in np.unique(hours).tolist():
                part = table.filter(pa.array(hours == hour))
                key = archive_events_key(hour, self.topic, self.partition, first, end)
                store.put(key, to_parquet(part))
                files.append(key)
                events[key.split("/")[2].removeprefix("hour=")] = part.num_rows
        dead: dict[str, int] = {}
        if self._dead:
            by_hour: dict[int, list[DeadLetter]] = {}
            for letter in self._dead:
                by_hour.setdefault(hour_start(letter.timestamp), []).append(letter)
            for hour, letters in sorted(by_hour.items()):
                key = archive_dead_letters_key(hour, self.topic, self.partition, first, end)
                store.put(key, to_parquet(self._dead_table(letters)))
                files.append(key)
                dead[key.split("/")[2].removeprefix("hour=")] = len(letters)
        record = RangeRecord(self.topic, self.partition, first, end, events, dead, tuple(files))
        store.put(
            archive_range_key(self.topic, self.partition, first, end),
            record.to_json(),
        )
        self.first = end
        self._batches.clear()
        self._dead.clear()
        return record

    def _events_table(self) -> pa.Table:
        batches = self._batches
        data = {
            name: np.concatenate([b.columns[name] for b in batches]) for name in batches[0].columns
        }
        offsets = np.concatenate([b.offsets for b in batches])
        data["topic"] = np.full(len(offsets), self.topic, dtype=object)
        data["partition"] = np.full(len(offsets), self.partition, dtype=np.int32)
        data["offset"] = offsets
        data["kafka_timestamp"] = np.concatenate([b.kafka_timestamps for b in batches])
        return pa.table(
            {f.name: pa.array(data[f.name], f.type) for f in ARCHIVE_SCHEMA}, schema=ARCHIVE_SCHEMA
        )

    def _dead_table(self, letters: list[DeadLetter]) -> pa.Table:
        return pa.table(
            {
                "topic": [self.topic] * len(letters),
                "partition": [self.partition] * len(letters),
                "offset": [d.offset for d in letters],
                "kafka_timestamp": [d.timestamp for d in letters],
                "reason": [d.reason for d in letters],
                "detail": [d.detail for d in letters],
                "value": [d.value for d in letters],
            },
            schema=DEAD_LETTER_SCHEMA,
        )


def discard_uncommitted(store: ObjectStore, topic: str, partition: int, offset: int) -> int:
    """Remove ranges starting at or after ``offset`` (written after the last checkpoint)."""
    removed = 0
    for key in store.list(archive_ranges_prefix(topic, partition)):
        first = int(key.rsplit("/", 1)[1].split("-")[0])
        if first < offset:
            continue
        try:
            record = json.loads(store.get(key))
        except FileNotFoundError:
            continue
        for path in record.get("files", []):
            store.delete(path)
        store.delete(key)
        removed += 1
    if removed:
        log.info(
            "%s-%d: discarded %d archive range(s) from offset %d", topic, partition, removed, offset
        )
    return removed
