"""Reaching the cluster: bootstrap resolution, client settings, topics and offsets.

The same code serves the embedded broker and real Kafka/MSK. Two defects of the embedded
broker are designed around here so that nothing else needs to know: ``end_offsets`` can
under-report (we take the max with the fetch high watermark), and the first group join takes
half the session timeout (we use short session timeouts locally).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from pipelines.config import KafkaSettings, SluiceSettings
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka.embedded import EmbeddedBroker

__all__ = [
    "beginning_offsets",
    "consumer",
    "end_offsets",
    "ensure_topics",
    "producer",
    "resolve_bootstrap",
]

log = logging.getLogger(__name__)

# Large fetches: one poll should hand the decoder thousands of records.
CONSUMER_FETCH = {
    "fetch_max_bytes": 32 * 1024 * 1024,
    "max_partition_fetch_bytes": 8 * 1024 * 1024,
    "fetch_max_wait_ms": 100,
    "receive_buffer_bytes": 4 * 1024 * 1024,
}
# The embedded broker's first join takes ~half the session timeout; keep it short.
GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def resolve_bootstrap(settings: SluiceSettings, kafka: KafkaSettings | None = None) -> str:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set, else the running embedded broker."""
    kafka = kafka or KafkaSettings()
    if kafka.bootstrap_servers:
        return kafka.bootstrap_servers
    info = EmbeddedBroker(settings.resolved_state_dir).info()
    if info is None:
        raise BrokerUnavailable(
            f"no broker: KAFKA_BOOTSTRAP_SERVERS is unset and no embedded broker runs for "
            f"state dir {settings.resolved_state_dir}; start one with `sluice broker start`"
        )
    return info.bootstrap


def _kwargs(bootstrap: str, kafka: KafkaSettings | None) -> dict[str, Any]:
    return (kafka or KafkaSettings()).client_kwargs(bootstrap)


def producer(bootstrap: str, kafka: KafkaSettings | None = None, **extra: Any) -> KafkaProducer:
    options = {"linger_ms": 5, "batch_size": 256 * 1024, "acks": 1, **extra}
    try:
        return KafkaProducer(**_kwargs(bootstrap, kafka), **options)
    except KafkaError as exc:
        raise BrokerUnavailable(f"no broker answers at {bootstrap}") from exc


def consumer(bootstrap: str, kafka: KafkaSettings | None = None, **extra: Any) -> KafkaConsumer:
    options = {**CONSUMER_FETCH, **GROUP_TIMEOUTS, "enable_auto_commit": False, **extra}
    try:
        return KafkaConsumer(**_kwargs(bootstrap, kafka), **options)
    except KafkaError as exc:
        raise BrokerUnavailable(f"no broker answers at {bootstrap}") from exc


def ensure_topics(
    bootstrap: str,
    topics: dict[str, int],
    kafka: KafkaSettings | None = None,
    timeout_s: float = 15.0,
) -> None:
    """Create missing topics (name -> partitions) and wait until their metadata is visible."""
    try:
        admin = KafkaAdminClient(**_kwargs(bootstrap, kafka))
    except KafkaError as exc:
        raise BrokerUnavailable(f"no broker answers at {bootstrap}") from exc
    try:
        existing = set(admin.list_topics())
        missing = [
            NewTopic(name, num_partitions=n, replication_factor=1)
            for name, n in topics.items()
            if name not in existing
        ]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(missing)
    finally:
        admin.close()
    probe = consumer(bootstrap, kafka)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            known = {t: probe.partitions_for_topic(t) for t in topics}
            if all(known.values()):
                return
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"topics {sorted(topics)} not visible after {timeout_s}s")
            probe.topics()  # refresh metadata
            time.sleep(0.1)
    finally:
        probe.close()


def end_offsets(
    client: KafkaConsumer, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """Log-end offsets, corrected by the fetch high watermark where the consumer knows it."""
    try:
        ends = client.end_offsets(partitions)
    except KafkaError as exc:
        log.warning("end_offsets failed: %s", exc)
        ends = {}
    result = {}
    assigned = client.assignment()
    for tp in partitions:
        high = client.highwater(tp) if tp in assigned else None
        result[tp] = max(v for v in (ends.get(tp), high, 0) if v is not None)
    return result


def fetched_log_end(
    bootstrap: str,
    kafka: KafkaSettings | None,
    tp: TopicPartition,
    near: int,
    timeout_s: float = 5.0,
) -> int | None:
    """The log end of ``tp`` as a fetch's high watermark says, fetching just before ``near``.

    ListOffsets under-reports on some brokers (Tansu answers the last batch's base offset + 1),
    so a restore that finds its checkpoint past the listed end asks a fetch before concluding
    the log was lost. None if no fetch answered in time.
    """
    probe = consumer(bootstrap, kafka, auto_offset_reset="earliest")
    try:
        probe.assign([tp])
        probe.seek(tp, max(0, near - 1))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            probe.poll(timeout_ms=200, max_records=1)
            high = probe.highwater(tp)
            if high is not None:
                return high
        return None
    finally:
        probe.close()


def beginning_offsets(
    client: KafkaConsumer, partitions: list[TopicPartition], timeout_s: float = 10.0
) -> dict[TopicPartition, int]:
    """Log-start offsets: the oldest offset the broker still holds per partition.

    Unlike :func:`end_offsets` there is no safe fallback (0 would claim the broker holds
    offsets it may have deleted), so a failure raises :class:`BrokerUnavailable`.
    """
    try:
        return client.beginning_offsets(partitions, timeout_ms=int(timeout_s * 1000))
    except KafkaError as exc:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
        raise BrokerUnavailable(f"log start offsets of {names} unavailable: {exc}") from exc
