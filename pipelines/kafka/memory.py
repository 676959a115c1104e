"""A broker in memory, with a reader and a writer that implement the stream worker's interfaces
(:class:`~pipelines.kafka.reader.Reader`, :class:`~pipelines.kafka.writer.Writer`).

For tests of what a worker does with its records (crashes, a rate cap, checkpoints at the
input's end) without a broker process. The reader keeps the rules a worker relies on: records
by partition as columns in ascending offsets, at most ``max_records`` a poll, a poll that waits
up to its timeout for records, a position out of the log's range restarts at the log start (as
``auto.offset.reset=earliest`` does), offsets committed per group, and exact log ends. What a
broker does beyond that (the embedded broker's under-reported ends, client timeouts) is tested
against the broker (``tests/pipelines/kafka/``)::

    broker = MemoryBroker()
    broker.create_topic("events", 2)
    broker.send("events", b"key", b'{"id": "e1", ...}', partition=0)
    clients = WorkerClients(broker.reader("sluice-events"), broker.writer(), timeout_s=5.0)
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka import TopicPartition

from pipelines.events.decode import RecordBatch

__all__ = ["MemoryBroker", "MemoryReader", "MemoryWriter", "StoredRecord"]


@dataclass(frozen=True)
class StoredRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class MemoryBroker:
    """Topics of partitions of records, safe to use from several threads."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._logs: dict[str, list[list[StoredRecord]]] = {}
        self._starts: dict[TopicPartition, int] = {}
        self._keyless = 0
        self.committed: dict[tuple[str, TopicPartition], int] = {}
        """(group, partition) -> the offset last committed."""

    def create_topic(self, topic: str, partitions: int) -> None:
        with self._changed:
            self._logs.setdefault(topic, [[] for _ in range(partitions)])

    def partitions(self, topic: str) -> int:
        with self._changed:
            return len(self._logs.get(topic, ()))

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int:
        """Append a record; its offset. A topic not created has one partition (as a broker
        that creates topics on first use); without ``partition`` a key picks one by a stable
        hash and keyless records take turns. ``headers``: (name, value) pairs, as Kafka's."""
        with self._changed:
            log = self._logs.setdefault(topic, [[]])
            if partition is None:
                if key is None:
                    partition, self._keyless = self._keyless % len(log), self._keyless + 1
                else:
                    partition = zlib.crc32(key) % len(log)
            records = log[partition]
            offset = self._starts.get(TopicPartition(topic, partition), 0) + len(records)
            stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
            records.append(StoredRecord(offset, stamp, key, value, tuple(headers)))
            self._changed.notify_all()
            return offset

    def records(self, topic: str, partition: int) -> list[StoredRecord]:
        """What the partition holds now, from its log start."""
        with self._changed:
            return list(self._logs[topic][partition])

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Drop the records before offset ``before``, as retention does: the log start moves."""
        tp = TopicPartition(topic, partition)
        with self._changed:
            start = self._starts.get(tp, 0)
            records = self._logs[topic][partition]
            dropped = max(0, min(before - start, len(records)))
            del records[:dropped]
            self._starts[tp] = start + dropped

    def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """The partition's log start and end (the next offset to be written)."""
        with self._changed:
            start = self._starts.get(tp, 0)
            return start, start + len(self._logs[tp.topic][tp.partition])

    def reader(self, group_id: str) -> MemoryReader:
        return MemoryReader(self, group_id)

    def writer(self) -> MemoryWriter:
        return MemoryWriter(self)

    def _read(self, positions: dict[TopicPartition, int], max_records: int) -> dict:
        out: dict[TopicPartition, RecordBatch] = {}
        with self._changed:
            for tp, position in positions.items():
                if max_records <= 0:
                    break
                start, end = self.bounds(tp)
                if not start <= position <= end:
                    position = start  # out of range: restart at the log start (earliest)
                log = self._logs[tp.topic][tp.partition]
                taken = log[position - start : position - start + max_records]
                positions[tp] = position + len(taken)
                if taken:
                    out[tp] = RecordBatch.of(taken)
                    max_records -= len(taken)
        return out

    def _wait(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)


class MemoryReader:
    """A :class:`~pipelines.kafka.reader.Reader` of a :class:`MemoryBroker`; each poll starts
    at the next partition, so one busy partition does not starve the others."""

    def __init__(self, broker: MemoryBroker, group_id: str) -> None:
        self.broker = broker
        self.group_id = group_id
        self.positions: dict[TopicPartition, int] = {}
        self.closed = False

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        self.positions = dict(positions)

    def poll(self, timeout_s: float, max_records: int) -> dict[TopicPartition, RecordBatch]:
        deadline = time.monotonic() + timeout_s
        while True:
            order = list(self.positions)
            polled = self.broker._read(self.positions, max_records)
            if order:  # the next poll starts at the next partition
                self.positions = {tp: self.positions[tp] for tp in order[1:] + order[:1]}
            left = deadline - time.monotonic()
            if polled or left <= 0:
                return polled
            self.broker._wait(left)

    def commit(self, tp: TopicPartition, offset: int) -> None:
        self.broker.committed[(self.group_id, tp)] = offset

    def fetched_end(self, tp: TopicPartition, near: int) -> int | None:
        return self.broker.bounds(tp)[1]

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.broker.bounds(tp)[0] for tp in tps}

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.broker.bounds(tp)[1] for tp in tps}

    def close(self) -> None:
        self.closed = True


class MemoryWriter:
    """A :class:`~pipelines.kafka.writer.Writer` to a :class:`MemoryBroker`: a send is
    delivered at once, so a flush has nothing to wait for."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.closed = False

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.broker.send(topic, key, value)

    def flush(self, timeout_s: float = 60.0) -> None:
        return None

    def close(self) -> None:
        self.closed = True
