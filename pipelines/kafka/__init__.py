"""Kafka access for the data plane: the embedded broker, a broker in memory for tests, and
client helpers.

May import: ``pipelines.config``, ``pipelines.events`` (the record batches a reader hands
out), ``pipelines.exceptions``.
"""

from pipelines.kafka.client import (
    beginning_offsets,
    consumer,
    end_offsets,
    ensure_topics,
    exact_end_offsets,
    fetched_log_end,
    partitions_of,
    producer,
    resolve_bootstrap,
    within,
)
from pipelines.kafka.embedded import BrokerInfo, EmbeddedBroker, free_port

__all__ = [
    "BrokerInfo",
    "EmbeddedBroker",
    "beginning_offsets",
    "consumer",
    "end_offsets",
    "ensure_topics",
    "exact_end_offsets",
    "fetched_log_end",
    "free_port",
    "partitions_of",
    "producer",
    "resolve_bootstrap",
    "within",
]
