"""The raw archive: every valid event in hourly Parquet partitions by event time.

A task archives what it consumed since its last flush as offset range ``[first, end)``.
File names derive from (partition, range), so a replay rewrites the same names, and on
restore a task removes ranges that start at or after its checkpoint (written after the last
checkpoint, they will be written again). One JSON record per range says what it holds, so
anyone can tell which offsets of which partitions an hour has.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable
from concurrent.futures import Future

import numpy as np
import pyarrow as pa

from pipelines.archive.encoder import encode_later
from pipelines.archive.schema import archive_schema
from pipelines.events.declaration import ColumnType, TopicDeclaration
from pipelines.events.decode import DeadLetter, DecodedBatch
from pipelines.segments import (
    HOUR_MS,
    ParquetStream,
    RangeRecord,
    archive_dead_letters_key,
    archive_events_key,
    archive_range_key,
    archive_ranges_prefix,
    bucket_suffix,
    hour_start,
    to_parquet,
)
from pipelines.storage import ObjectStore

__all__ = [
    "ALIGN_OFFSETS",
    "DEAD_LETTER_SCHEMA",
    "ROW_GROUP_ROWS",
    "ArchiveBuffer",
    "dictionary_columns",
]

log = logging.getLogger(__name__)

_KAFKA_DICTIONARY = ("topic", "partition")


def dictionary_columns(declaration: TopicDeclaration) -> tuple[str, ...]:
    """The archive's columns that are dictionary-encoded: the declared string columns but the
    id, and the topic and partition (one value per file). Ids, times, numbers and offsets are
    not: a dictionary of mostly unique values only slows the writer and makes files larger
    (Parquet falls back to plain pages for a string column whose dictionary grows too big)."""
    strings = [
        name
        for name, kind in declaration.columns().items()
        if kind is ColumnType.STRING and name != declaration.id
    ]
    return (*strings, *_KAFKA_DICTIONARY)


DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("kafka_timestamp", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("field", pa.string(), nullable=True),
    ]
)
"""A dead letter's ``field``: the declared field whose value did not fit (missing_field,
wrong_type, out_of_range), else null; files written before it was added lack the column and
read as null."""


ROW_GROUP_ROWS = 65_536
"""Events a task buffers before they go to the encoding thread as row groups of its hourly
files: between flushes memory holds these and compressed Parquet, not every decoded event
(gigabytes a minute at a worker's full rate)."""

ALIGN_OFFSETS = 65_536
"""A virtual task cuts its ranges at multiples of this offset, so the ranges of a partition's
buckets line up and the nothing-lost check reads at most this many offsets to prove a span."""


class ArchiveBuffer:
    """Valid events and dead letters of one task since its last archive write.

    Events go to the encoding thread (:mod:`pipelines.archive.encoder`) every
    :data:`ROW_GROUP_ROWS`, as row groups of the hourly files they belong to; a write waits for
    them, then stores the files and the range's record. A virtual task (bucket of factor)
    archives only its bucket's records under names that carry the bucket, and cuts its ranges
    at multiples of :data:`ALIGN_OFFSETS` (its files are kept per aligned block of offsets).
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        first_offset: int,
        bucket: int = 0,
        factor: int = 1,
        *,
        declaration: TopicDeclaration,
    ) -> None:
        self.topic = topic
        self.schema = archive_schema(declaration)
        """The topic's archived columns (:func:`pipelines.archive.schema.archive_schema`)."""
        self._dictionary = dictionary_columns(declaration)
        self.partition = partition
        self.bucket = bucket
        self.factor = factor
        self.first = first_offset
        self._batches: list[DecodedBatch] = []  # not handed to the encoding thread yet
        self._buffered = 0
        self._files: dict[tuple[int, int], ParquetStream] = {}  # (block, hour) -> its file
        self._encoding: list[Future] = []
        self._finished: dict[tuple[int, int], tuple[bytes, int]] = {}  # kept until stored
        self._dead: list[DeadLetter] = []
        self._end = first_offset

    def add(self, batch: DecodedBatch) -> None:
        if len(batch):
            self._batches.append(batch)
            self._buffered += len(batch)
            if self._buffered >= ROW_GROUP_ROWS:
                self._encode()
        self._dead.extend(batch.dead_letters)
        if batch.next_offset > self._end:
            self._end = batch.next_offset

    def advance(self, end: int) -> None:
        """Offsets up to ``end`` were read and none was this task's (another bucket's)."""
        self._end = max(self._end, end)

    def write(self, store: ObjectStore) -> RangeRecord | None:
        """Write the buffered range (a virtual task: cut at aligned offsets); the range record
        goes last, after its files. The last record written, or None."""
        if self._end <= self.first:
            return None
        first, end = self.first, self._end
        cuts = [first, end]
        if self.factor > 1:
            step = ALIGN_OFFSETS
            cuts = [first, *range((first // step + 1) * step, end, step), end]
        if self._batches:
            self._encode()
        files = self._finish()
        record = None
        for lo, hi in itertools.pairwise(cuts):
            block = self._block(lo)
            parts = {hour: file for (b, hour), file in files.items() if b == block}
            dead = [d for d in self._dead if lo <= d.offset < hi]
            record = self._write_range(store, lo, hi, parts, dead)
        self.first = end
        self._finished.clear()
        self._dead.clear()
        return record

    def _block(self, offsets: int | np.ndarray) -> int | np.ndarray:
        """Which of a virtual task's aligned ranges each of ``offsets`` (one, or an array)
        falls in (0: not cut)."""
        return offsets // ALIGN_OFFSETS if self.factor > 1 else offsets * 0

    def _encode(self) -> None:
        """Hand the buffered events to the encoding thread: one row group per file (block of
        offsets, event-time hour) they belong to, in offset order."""
        table = self._events_table()
        self._batches.clear()
        self._buffered = 0
        times = table.column("event_time").to_numpy()
        hours = times - times % HOUR_MS
        blocks = self._block(table.column("offset").to_numpy())
        for hour in np.unique(hours).tolist():
            in_hour = hours == hour
            for block in np.unique(blocks[in_hour]).tolist():
                rows = in_hour & (blocks == block)
                part = table if rows.all() else table.filter(pa.array(rows))
                file = self._files.get((block, hour))
                if file is None:
                    file = self._files[block, hour] = ParquetStream(self.schema, self._dictionary)
                self._encoding.append(encode_later(file.write, part))

    def _finish(self) -> dict[tuple[int, int], tuple[bytes, int]]:
        """Every file's bytes and rows, once the encoding thread has written them all (what
        it raised is raised here); kept until the range is stored, so a failed write can be
        tried again."""
        for done in self._encoding:
            done.result()
        self._encoding.clear()
        for where, file in self._files.items():
            self._finished[where] = (file.finish(), file.rows)
        self._files.clear()
        return self._finished

    def _write_range(
        self,
        store: ObjectStore,
        first: int,
        end: int,
        parts: dict[int, tuple[bytes, int]],
        dead_letters: list[DeadLetter],
    ) -> RangeRecord:
        where = (self.topic, self.partition, first, end, self.bucket, self.factor)
        files: list[str] = []
        events: dict[str, int] = {}
        for hour in sorted(parts):
            data, rows = parts[hour]
            key = archive_events_key(hour, *where)
            store.put(key, data)
            files.append(key)
            events[key.split("/")[2].removeprefix("hour=")] = rows
        dead: dict[str, int] = {}
        if dead_letters:
            by_hour: dict[int, list[DeadLetter]] = {}
            for letter in dead_letters:
                by_hour.setdefault(hour_start(letter.timestamp), []).append(letter)
            for hour, letters in sorted(by_hour.items()):
                key = archive_dead_letters_key(hour, *where)
                store.put(key, to_parquet(self._dead_table(letters)))
                files.append(key)
                dead[key.split("/")[2].removeprefix("hour=")] = len(letters)
        record = RangeRecord(
            self.topic,
            self.partition,
            first,
            end,
            events,
            dead,
            tuple(files),
            self.bucket,
            self.factor,
        )
        store.put(archive_range_key(*where), record.to_json())
        return record

    def _events_table(self) -> pa.Table:
        """The buffered batches as one table of :attr:`schema`: a string column holds None
        where it is null, another column's null is its batch's mask (``DecodedBatch.nulls``)."""
        batches = self._batches
        offsets = np.concatenate([b.offsets for b in batches])
        n = len(offsets)
        kafka = {
            "partition": pa.array(np.full(n, self.partition, dtype=np.int32), pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "kafka_timestamp": pa.array(
                np.concatenate([b.kafka_timestamps for b in batches]), pa.int64()
            ),
            # one value repeated in Arrow, not a Python string converted per row
            "topic": pa.repeat(pa.scalar(self.topic, pa.string()), n),
        }
        columns = []
        for f in self.schema:
            if f.name in kafka:
                columns.append(kafka[f.name])
                continue
            values = np.concatenate([b.columns[f.name] for b in batches])
            mask = None
            if any(f.name in b.nulls for b in batches):
                mask = np.concatenate(
                    [b.nulls.get(f.name, np.zeros(len(b), dtype=bool)) for b in batches]
                )
            columns.append(pa.array(values, f.type, mask=mask))
        return pa.Table.from_arrays(columns, schema=self.schema)

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
                "field": [d.field for d in letters],
            },
            schema=DEAD_LETTER_SCHEMA,
        )


def counted_until(bucket: int, factor: int, skips: Iterable[tuple[int, int, int]]) -> int:
    """The offset below which a merge's skips cover every record of bucket ``bucket`` of
    ``factor`` (0: none do): a skip ``(b, f, until)`` covers the bucket when ``f`` divides
    ``factor`` and the bucket's records hash to ``b`` modulo ``f``."""
    return max((u for b, f, u in skips if f <= factor and bucket % f == b), default=0)


def discard_uncommitted(
    store: ObjectStore,
    topic: str,
    partition: int,
    offset: int,
    bucket: int = 0,
    factor: int = 1,
    counted_until: int = 0,
) -> int:
    """Remove the task's ranges starting at or after ``offset`` (written after its last
    checkpoint); a virtual task removes only its own bucket's. Returns the end of the last
    range removed (how far the task had flushed before it stopped), or ``offset`` if none.

    Ranges ending at or before ``counted_until`` are kept: a task whose every record below it
    a merge's skip says was counted already (:func:`counted_until`) can bear the name of the
    bucket that counted them, whose ranges those are, committed by its checkpoint."""
    removed = 0
    flushed = offset
    suffix = bucket_suffix(bucket, factor) + ".json"
    for key in store.list(archive_ranges_prefix(topic, partition)):
        name = key.rsplit("/", 1)[1]
        if not name.endswith(suffix) or (factor == 1 and "-b" in name):
            continue
        first, end = (int(part) for part in name.removesuffix(".json").split("-")[:2])
        if first < offset or end <= counted_until:
            continue
        try:
            record = json.loads(store.get(key))
        except FileNotFoundError:
            continue
        for path in record.get("files", []):
            store.delete(path)
        store.delete(key)
        removed += 1
        flushed = max(flushed, int(record.get("end", offset)))
    if removed:
        log.info(
            "%s-%d: discarded %d archive range(s) from offset %d to %d",
            topic,
            partition,
            removed,
            offset,
            flushed,
        )
    return flushed
