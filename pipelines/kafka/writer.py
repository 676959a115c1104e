"""The generator's Kafka writer: send keyed messages fast, then wait for every delivery.

librdkafka (confluent-kafka) produces much faster than kafka-python, whose producer does each
keyed send's work in Python (docs/kafka.md). ``SLUICE_KAFKA_CLIENT`` picks one, as for the reader
(:mod:`pipelines.kafka.reader`). A delivery that fails is counted and its error kept; flush
raises if any failed, so a replay never reports messages that are not in the topic.
"""

from __future__ import annotations

import logging
from typing import Protocol

from kafka.errors import KafkaError

from pipelines.config import KafkaSettings
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka.client import producer
from pipelines.kafka.reader import librdkafka_config

__all__ = ["ConfluentWriter", "DeliveryFailures", "KafkaPythonWriter", "Writer", "open_writer"]

log = logging.getLogger(__name__)


class Writer(Protocol):
    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None: ...

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every message sent so far is delivered; raise if any was not."""
        ...

    def close(self) -> None: ...


class DeliveryFailures:
    """Deliveries that failed since the last flush. A flush raises for them once and forgets
    them: a stream worker's dead letters that failed are sent again when their task replays
    from its checkpoint, so the next flush must not fail for them again."""

    def __init__(self) -> None:
        self.count = 0
        self.error: str | None = None

    def record(self, error: object) -> None:
        self.count += 1
        self.error = str(error)

    def raise_any(self) -> None:
        count, error = self.count, self.error
        self.count, self.error = 0, None
        if count:
            raise BrokerUnavailable(f"{count} messages not delivered: {error}")


class KafkaPythonWriter:
    def __init__(self, bootstrap: str, kafka: KafkaSettings | None) -> None:
        self.client = producer(bootstrap, kafka, max_request_size=4 * 1024 * 1024)
        self.failures = DeliveryFailures()
        self.timeout_s = (kafka or KafkaSettings()).timeout_s

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.client.send(topic, key=key, value=value).add_errback(self.failures.record)

    def flush(self, timeout_s: float = 60.0) -> None:
        try:
            self.client.flush(timeout=timeout_s)
        except KafkaError as exc:
            raise BrokerUnavailable(
                f"messages not delivered within {timeout_s:.0f}s: {exc}"
            ) from exc
        self.failures.raise_any()

    def close(self) -> None:
        self.client.close(timeout=self.timeout_s)


class ConfluentWriter:
    def __init__(self, bootstrap: str, kafka: KafkaSettings | None) -> None:
        from confluent_kafka import KafkaException, Producer

        config = {
            **librdkafka_config(bootstrap, kafka),
            "linger.ms": 5,
            "batch.size": 1024 * 1024,
            "queue.buffering.max.messages": 1_000_000,
            "message.max.bytes": 4 * 1024 * 1024,
            "acks": 1,
            # Only failures call back into Python: a callback per delivered message cost more
            # than producing it. flush() still waits for every delivery.
            "delivery.report.only.error": True,
            "logger": logging.getLogger("librdkafka"),
        }
        try:
            self.client = Producer(config)
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot create a producer for {bootstrap}: {exc}") from exc
        self.failures = DeliveryFailures()
        self._unpolled = 0
        self.timeout_s = (kafka or KafkaSettings()).timeout_s

    def _delivered(self, error, _message) -> None:
        if error is not None:
            self.failures.record(error)

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        while True:
            try:
                self.client.produce(topic, value=value, key=key, on_delivery=self._delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.client.poll(0.05)
        self._unpolled += 1
        if self._unpolled >= 1024:  # serve delivery reports now and then, not per message
            self._unpolled = 0
            self.client.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        left = self.client.flush(timeout_s)
        if left:
            raise BrokerUnavailable(f"{left} messages not delivered within {timeout_s:.0f}s")
        self.failures.raise_any()

    def close(self) -> None:
        self.client.flush(self.timeout_s)


def open_writer(bootstrap: str, kafka: KafkaSettings | None) -> Writer:
    """The writer ``SLUICE_KAFKA_CLIENT`` names."""
    kafka = kafka or KafkaSettings()
    if kafka.client == "confluent":
        return ConfluentWriter(bootstrap, kafka)
    return KafkaPythonWriter(bootstrap, kafka)
