"""The Kafka clients a stream worker is given: a reader of its topic and a writer of its dead
letters.

They are built where the worker is built (the agent, ``sluice worker``, tests, benchmarks), so
one worker runs the same on a broker (:func:`open_worker_clients`) and on the in-memory one of
:mod:`pipelines.kafka.memory`. The worker closes both when it stops.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.config import KafkaSettings
from pipelines.kafka.reader import Reader, open_reader
from pipelines.kafka.writer import Writer, open_writer

__all__ = ["WorkerClients", "consumer_group", "open_worker_clients"]


@dataclass(frozen=True)
class WorkerClients:
    """A worker's reader and dead-letter writer, and how long its dead-letter flushes wait."""

    reader: Reader
    """Reads the partitions of the worker's tasks and commits their checkpointed offsets."""
    dead_letters: Writer
    """Sends the records the tasks could not use to the dead-letter topic."""
    timeout_s: float
    """How long a flush of the dead letters may wait (``SLUICE_KAFKA_TIMEOUT_S``)."""


def consumer_group(topic: str) -> str:
    """The consumer group whose committed offsets mirror the checkpoints of a topic's tasks."""
    return f"sluice-{topic}"


def open_worker_clients(bootstrap: str, kafka: KafkaSettings | None, topic: str) -> WorkerClients:
    """The clients ``SLUICE_KAFKA_CLIENT`` names, on the broker at ``bootstrap``, for a worker
    of ``topic``'s tasks."""
    kafka = kafka or KafkaSettings()
    return WorkerClients(
        open_reader(bootstrap, kafka, consumer_group(topic)),
        open_writer(bootstrap, kafka),
        kafka.timeout_s,
    )
