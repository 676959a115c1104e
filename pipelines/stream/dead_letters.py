"""Bad input goes to the dead-letter topic with its reason: never dropped, never fatal."""

from __future__ import annotations

import base64
from typing import Protocol

import orjson

from pipelines.events.decode import DeadLetter
from pipelines.kafka.writer import Writer

__all__ = ["VALUE_MAX_BYTES", "DeadLetterSink", "KafkaDeadLetterSink", "dead_letter_message"]

VALUE_MAX_BYTES = 256 * 1024
"""A dead letter keeps at most this much of the message (base64 makes it a third larger): with
SLUICE_MAX_MESSAGE_BYTES raised near the producer's request size, a whole bad message would
not fit in its dead letter, and failing to send one would crash its task on every replay."""


class DeadLetterSink(Protocol):
    def send(self, topic: str, partition: int, letter: DeadLetter) -> None: ...

    def flush(self) -> None:
        """Block until everything sent is durable in the sink."""


def dead_letter_message(topic: str, partition: int, letter: DeadLetter) -> tuple[bytes, bytes]:
    """Key and value of a dead letter; the key (source position) lets readers drop replays."""
    key = f"{topic}:{partition}:{letter.offset}".encode()
    kept = letter.value
    if kept is not None and len(kept) > VALUE_MAX_BYTES:
        kept = kept[:VALUE_MAX_BYTES]
    value = {
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": letter.offset,
        "kafka_timestamp": letter.timestamp,
        "reason": letter.reason,
        "detail": letter.detail,
        "field": letter.field,
        "value_b64": base64.b64encode(kept).decode() if kept is not None else None,
    }
    if kept is not None and len(kept) < len(letter.value or b""):
        value["value_bytes"] = len(letter.value or b"")  # kept only the first VALUE_MAX_BYTES
    return key, orjson.dumps(value)


class KafkaDeadLetterSink:
    """Dead letters through the worker's Kafka writer (:mod:`pipelines.kafka.writer`, the client
    ``SLUICE_KAFKA_CLIENT`` names): with librdkafka a send queues the message in C and returns,
    where kafka-python's producer does each send's work and runs its network loop in Python,
    holding the GIL the tasks need."""

    def __init__(self, writer: Writer, topic: str, timeout_s: float) -> None:
        self.writer = writer
        self.topic = topic
        self.timeout_s = timeout_s
        """How long :meth:`flush` waits for deliveries; past it the writer raises
        (BrokerUnavailable) and the checkpoint that flushed does not happen."""

    def send(self, topic: str, partition: int, letter: DeadLetter) -> None:
        key, value = dead_letter_message(topic, partition, letter)
        self.writer.send(self.topic, key, value)

    def flush(self) -> None:
        self.writer.flush(self.timeout_s)
