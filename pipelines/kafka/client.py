"""Reaching the cluster: bootstrap resolution, client settings, topics and offsets.

The same code serves the embedded broker and real Kafka/MSK. Two defects of the embedded
broker are designed around here so that nothing else needs to know: ``end_offsets`` can
under-report (we take the max with the fetch high watermark), and the first group join takes
half the session timeout (we use short session timeouts locally).

Every call has a deadline, ``SLUICE_KAFKA_TIMEOUT_S``: kafka-python's own timeouts where a
call takes one, and :func:`within` (the call in a thread of its own, given up on) where it does
not: its metadata calls (``topics``, ``partitions_for_topic``, the admin's ``list_topics``)
wait for the broker without end.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

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
    "partitions_of",
    "producer",
    "resolve_bootstrap",
    "within",
]

T = TypeVar("T")

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


def _timeout_s(kafka: KafkaSettings | None) -> float:
    return (kafka or KafkaSettings()).timeout_s


def within(timeout_s: float, what: str, call: Callable[[], T]) -> T:
    """``call()``, given up on after ``timeout_s`` with :class:`BrokerUnavailable`.

    For the calls kafka-python does not bound: the call runs in a daemon thread, left behind
    if it does not return (it ends when the broker answers, or with the process)."""
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"kafka: {what}", daemon=True).start()
    if not done.wait(timeout_s):
        raise BrokerUnavailable(f"{what}: no answer from the broker within {timeout_s:g} s")
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, KafkaError):
            raise BrokerUnavailable(f"{what}: {error}") from error
        raise error
    return outcome["value"]


def producer(bootstrap: str, kafka: KafkaSettings | None = None, **extra: Any) -> KafkaProducer:
    options = {
        "linger_ms": 5,
        "batch_size": 256 * 1024,
        "acks": 1,
        # send() waits this long for metadata or buffer space; flush and close take theirs
        "max_block_ms": int(_timeout_s(kafka) * 1000),
        **extra,
    }
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
    """Create missing topics (name -> partitions) and wait until their metadata is visible
    (within ``timeout_s`` plus the time to reach the broker)."""
    within(
        timeout_s + 2 * _timeout_s(kafka),
        f"creating topics {sorted(topics)}",
        lambda: _ensure_topics(bootstrap, topics, kafka, timeout_s),
    )


def _ensure_topics(
    bootstrap: str, topics: dict[str, int], kafka: KafkaSettings | None, timeout_s: float
) -> None:
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
                admin.create_topics(missing, timeout_ms=int(_timeout_s(kafka) * 1000))
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


def partitions_of(bootstrap: str, kafka: KafkaSettings | None, topic: str) -> list[int]:
    """The partitions of ``topic`` (none if it does not exist); :class:`BrokerUnavailable`
    when the broker does not say within ``SLUICE_KAFKA_TIMEOUT_S`` (twice: connect, ask)."""

    def ask() -> list[int]:
        probe = consumer(bootstrap, kafka)
        try:
            return sorted(probe.partitions_for_topic(topic) or [])
        finally:
            probe.close(timeout_ms=1000)

    return within(2 * _timeout_s(kafka), f"partitions of {topic}", ask)


def _client_timeout_ms(client: KafkaConsumer) -> int:
    return int(client.config["request_timeout_ms"])


def end_offsets(
    client: KafkaConsumer, partitions: list[TopicPartition], timeout_s: float | None = None
) -> dict[TopicPartition, int]:
    """Log-end offsets, corrected by the fetch high watermark where the consumer knows it.

    Waits at most ``timeout_s`` (default: the client's request timeout, which
    ``SLUICE_KAFKA_TIMEOUT_S`` sets); a broker that does not answer leaves what the consumer
    fetched, or 0."""
    timeout_ms = _client_timeout_ms(client) if timeout_s is None else int(timeout_s * 1000)
    try:
        ends = client.end_offsets(partitions, timeout_ms=timeout_ms)
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
        probe.close(timeout_ms=1000)


def exact_end_offsets(bootstrap: str, kafka: KafkaSettings | None, topic: str) -> dict[int, int]:
    """The next offset of each partition of ``topic``, exact: listed, then confirmed by a
    fetch's high watermark where the broker holds anything (ListOffsets may under-report,
    see :func:`fetched_log_end`). For a producer that has flushed: where its input ended.

    Recorded as the input's end, a short answer would close hours before their last events
    were read, so a partition whose fetch does not answer within ``SLUICE_KAFKA_TIMEOUT_S``
    raises :class:`BrokerUnavailable` rather than falling back to the listed end."""
    timeout_s = _timeout_s(kafka)
    probe = consumer(bootstrap, kafka)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(probe.partitions_for_topic(topic) or [])]
        listed = end_offsets(probe, tps)
    finally:
        probe.close(timeout_ms=1000)
    ends = {}
    for tp, end in listed.items():
        fetched = fetched_log_end(bootstrap, kafka, tp, end, timeout_s) if end > 0 else 0
        if fetched is None:
            raise BrokerUnavailable(
                f"the end of {tp.topic}-{tp.partition}: no fetch answered within {timeout_s:g} s "
                f"(the listed end, {end}, may be short)"
            )
        ends[tp.partition] = max(end, fetched)
    return ends


def beginning_offsets(
    client: KafkaConsumer, partitions: list[TopicPartition], timeout_s: float | None = None
) -> dict[TopicPartition, int]:
    """Log-start offsets: the oldest offset the broker still holds per partition.

    Unlike :func:`end_offsets` there is no safe fallback (0 would claim the broker holds
    offsets it may have deleted), so a failure raises :class:`BrokerUnavailable`.
    """
    timeout_ms = _client_timeout_ms(client) if timeout_s is None else int(timeout_s * 1000)
    try:
        return client.beginning_offsets(partitions, timeout_ms=timeout_ms)
    except KafkaError as exc:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
        raise BrokerUnavailable(f"log start offsets of {names} unavailable: {exc}") from exc
