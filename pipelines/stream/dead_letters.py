"""Bad input goes to the dead-letter topic with its reason: never dropped, never fatal."""

from __future__ import annotations

import base64
from typing import Protocol

import orjson

from pipelines.events.decode import DeadLetter

__all__ = ["DeadLetterSink", "KafkaDeadLetterSink", "dead_letter_message"]


class DeadLetterSink(Protocol):
    def send(self, topic: str, partition: int, letter: DeadLetter) -> None: ...

    def flush(self) -> None:
        """Block until everything sent is durable in the sink."""


def dead_letter_message(topic: str, partition: int, letter: DeadLetter) -> tuple[bytes, bytes]:
    """Key and value of a dead letter; the key (source position) lets readers drop replays."""
    key = f"{topic}:{partition}:{letter.offset}".encode()
    value = {
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": letter.offset,
        "kafka_timestamp": letter.timestamp,
        "reason": letter.reason,
        "detail": letter.detail,
        "value_b64": base64.b64encode(letter.value).decode() if letter.value is not None else None,
    }
    return key, orjson.dumps(value)


class KafkaDeadLetterSink:
    def __init__(self, producer, topic: str, timeout_s: float | None = None) -> None:
        self.producer = producer
        self.topic = topic
        self.timeout_s = timeout_s
        """How long :meth:`flush` waits for deliveries (None: until done); past it the
        producer raises and the checkpoint that flushed does not happen."""

    def send(self, topic: str, partition: int, letter: DeadLetter) -> None:
        key, value = dead_letter_message(topic, partition, letter)
        self.producer.send(self.topic, key=key, value=value)

    def flush(self) -> None:
        self.producer.flush(timeout=self.timeout_s)
