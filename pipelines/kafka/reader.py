"""The stream worker's Kafka reader: one small interface, two clients behind it.

librdkafka (confluent-kafka) reads much faster than kafka-python on the same broker
(docs/kafka.md, ``benchmarks/ingest.py``); kafka-python stays supported and is the independent
client the tests build their oracles with. ``SLUICE_KAFKA_CLIENT`` picks one (default
confluent). What the worker needs: assign partitions at given offsets, poll records by
partition as columns (offsets, timestamps, values, keys, headers), commit an offset, and the
log's start and end, where the end is the larger of what the broker lists and the high
watermark fetches reported (the embedded broker lists the last batch's base offset + 1, short
of the end when producers batch: docs/kafka.md), and for a checkpoint past that end, the end a
fetch reports.
:mod:`pipelines.kafka.memory` implements the same interface without a broker, for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from pipelines.config import KafkaSettings
from pipelines.events.decode import RecordBatch
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka.client import (
    CONSUMER_FETCH,
    beginning_offsets,
    consumer,
    end_offsets,
    fetched_log_end,
)
from pipelines.kafka.columns import by_partition

__all__ = ["ConfluentReader", "KafkaPythonReader", "Reader", "RecordBatch", "open_reader"]

log = logging.getLogger(__name__)


class Reader(Protocol):
    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Read exactly these partitions, each from its offset."""
        ...

    def poll(self, timeout_s: float, max_records: int) -> dict[TopicPartition, RecordBatch]:
        """Records by partition as columns, ascending offsets; empty when none came in time."""
        ...

    def commit(self, tp: TopicPartition, offset: int) -> None: ...

    def fetched_end(self, tp: TopicPartition, near: int) -> int | None:
        """The log end as a fetch just before ``near`` reports it, for a checkpoint found past
        the listed end (which may under-report); None if no fetch answered in time."""
        ...

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...

    def close(self) -> None: ...


COMMIT_TIMEOUT_S = 2.0
"""The longest a reader waits for a commit to the consumer group (a courtesy copy of the
checkpoint); SLUICE_KAFKA_TIMEOUT_S if shorter."""

COMMIT_PAUSE_S = 30.0
"""After a commit failed, commits are skipped this long: with the broker gone, a stop that
checkpoints many tasks must not wait ``COMMIT_TIMEOUT_S`` for each."""


class Commits:
    """Commits to the consumer group with a deadline, paused for a while after one failed."""

    def __init__(self, client: Any, timeout_s: float) -> None:
        self.client = client
        self.timeout_ms = int(min(timeout_s, COMMIT_TIMEOUT_S) * 1000)
        self.paused_until = 0.0

    def commit(self, tp: TopicPartition, offset: int) -> None:
        if time.monotonic() < self.paused_until:
            raise KafkaError("skipped: a commit failed less than 30 s ago")
        try:
            self.client.commit({tp: OffsetAndMetadata(offset, "", -1)}, timeout_ms=self.timeout_ms)
        except KafkaError:
            self.paused_until = time.monotonic() + COMMIT_PAUSE_S
            raise


class KafkaPythonReader:
    """kafka-python's KafkaConsumer (manual assignment; the group only stores commits)."""

    def __init__(self, bootstrap: str, kafka: KafkaSettings | None, group_id: str) -> None:
        self.bootstrap = bootstrap
        self.kafka = kafka
        # as librdkafka's below: an out-of-range fetch restarts at the log start, not its end
        self.client = consumer(bootstrap, kafka, group_id=group_id, auto_offset_reset="earliest")
        self.commits = Commits(self.client, (kafka or KafkaSettings()).timeout_s)

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        self.client.assign(list(positions))
        for tp, offset in positions.items():
            self.client.seek(tp, offset)

    def poll(self, timeout_s: float, max_records: int) -> dict[TopicPartition, RecordBatch]:
        if not self.client.assignment():
            return {}
        polled = self.client.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        return {tp: RecordBatch.of(records) for tp, records in polled.items()}

    def commit(self, tp: TopicPartition, offset: int) -> None:
        self.commits.commit(tp, offset)

    def fetched_end(self, tp: TopicPartition, near: int) -> int | None:
        return fetched_log_end(self.bootstrap, self.kafka, tp, near)

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return beginning_offsets(self.client, list(tps))

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return end_offsets(self.client, list(tps))

    def close(self) -> None:
        self.client.close(timeout_ms=1000)


def librdkafka_config(bootstrap: str, kafka: KafkaSettings | None) -> dict[str, Any]:
    """The one converter from settings to librdkafka's configuration."""
    kafka = kafka or KafkaSettings()
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "security.protocol": kafka.security_protocol,
        "socket.timeout.ms": kafka.timeout_ms,  # every request's deadline (default 60 s)
    }
    if kafka.sasl_mechanism:
        config["sasl.mechanism"] = kafka.sasl_mechanism
        config["sasl.username"] = kafka.sasl_username or ""
        if kafka.sasl_password is not None:
            config["sasl.password"] = kafka.sasl_password.get_secret_value()
    if kafka.ssl_cafile:
        config["ssl.ca.location"] = kafka.ssl_cafile
    return config


class ConfluentReader:
    """librdkafka through confluent-kafka: large fetches, batches of up to ``max_records``."""

    def __init__(self, bootstrap: str, kafka: KafkaSettings | None, group_id: str) -> None:
        from confluent_kafka import Consumer, KafkaException

        self._error = KafkaException
        self.bootstrap = bootstrap
        self.kafka = kafka
        self.group_id = group_id
        self.timeout_s = (kafka or KafkaSettings()).timeout_s
        self._committer = consumer(bootstrap, kafka, group_id=group_id)
        """A kafka-python consumer of the group, for commits (see :meth:`commit`); made now,
        while the broker answers, not at a stop's last checkpoint."""
        self.commits = Commits(self._committer, self.timeout_s)
        config = {
            **librdkafka_config(bootstrap, kafka),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            # A fetch out of range (retention deleted what a task had not read yet) restarts at
            # the log start, never at its end; the worker sees the jump and logs it as an error
            # (StreamWorker._check_reset). A checkpoint out of range is caught before the fetch.
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": CONSUMER_FETCH["fetch_max_bytes"],
            "max.partition.fetch.bytes": CONSUMER_FETCH["max_partition_fetch_bytes"],
            "fetch.wait.max.ms": CONSUMER_FETCH["fetch_max_wait_ms"],
            "queued.max.messages.kbytes": 64 * 1024,
            "fetch.queue.backoff.ms": 10,
            "logger": logging.getLogger("librdkafka"),
        }
        try:
            self.client = Consumer(config)
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot create a consumer for {bootstrap}: {exc}") from exc
        self.assigned: list[TopicPartition] = []

    @staticmethod
    def _ctp(tp: TopicPartition, offset: int | None = None):
        from confluent_kafka import TopicPartition as CTP

        return (
            CTP(tp.topic, tp.partition) if offset is None else CTP(tp.topic, tp.partition, offset)
        )

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        self.client.assign([self._ctp(tp, offset) for tp, offset in positions.items()])
        self.assigned = list(positions)

    def poll(self, timeout_s: float, max_records: int) -> dict[TopicPartition, RecordBatch]:
        if not self.assigned:
            return {}
        return by_partition(self.client.consume(num_messages=max_records, timeout=timeout_s))

    def commit(self, tp: TopicPartition, offset: int) -> None:
        """Through kafka-python, within ``COMMIT_TIMEOUT_S``: with the broker gone,
        librdkafka's synchronous commit waits for the group coordinator without end, and after
        an asynchronous one its close (and the process's exit) waits as long. The worker treats
        commits as a courtesy copy of the checkpoint, so a slow one is given up on."""
        self.commits.commit(tp, offset)

    def fetched_end(self, tp: TopicPartition, near: int) -> int | None:
        return fetched_log_end(self.bootstrap, self.kafka, tp, near)

    def _watermarks(
        self, tp: TopicPartition, cached: bool, timeout_s: float | None = None
    ) -> tuple[int, int] | None:
        try:
            low, high = self.client.get_watermark_offsets(
                self._ctp(tp), timeout=timeout_s or self.timeout_s, cached=cached
            )
        except self._error as exc:
            log.warning("watermarks of %s failed: %s", tp, exc)
            return None
        return (low, high) if high >= 0 else None

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        result = {}
        for tp in tps:
            marks = self._watermarks(tp, cached=False)
            if marks is None:
                raise BrokerUnavailable(f"the broker did not give the log start of {tp}")
            result[tp] = marks[0]
        return result

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The fetch high watermark where fetches gave one (exact, and no round trip: the
        worker asks every status interval), else what the broker lists."""
        result = {}
        deadline = time.monotonic() + self.timeout_s  # one deadline for all, not one each
        for tp in tps:
            fetched = self._watermarks(tp, cached=True) if tp in self.assigned else None
            left = deadline - time.monotonic()
            marks = fetched or (self._watermarks(tp, False, left) if left > 0 else None)
            result[tp] = marks[1] if marks is not None else 0
        return result

    def close(self) -> None:
        self.client.close()
        self._committer.close(timeout_ms=1000)


def open_reader(bootstrap: str, kafka: KafkaSettings | None, group_id: str) -> Reader:
    """The reader ``SLUICE_KAFKA_CLIENT`` names."""
    kafka = kafka or KafkaSettings()
    if kafka.client == "confluent":
        return ConfluentReader(bootstrap, kafka, group_id)
    return KafkaPythonReader(bootstrap, kafka, group_id)
