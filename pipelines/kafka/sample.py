"""Read a topic's first messages without joining a group or committing: what inference samples."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from kafka import KafkaConsumer, TopicPartition

from pipelines.config import KafkaSettings
from pipelines.exceptions import BrokerUnavailable, SluiceError
from pipelines.kafka.client import beginning_offsets, consumer, end_offsets, partitions_of

__all__ = ["UnknownTopic", "sample_topic"]

POLL_S = 0.5


class UnknownTopic(SluiceError):
    """The broker knows no topic of that name."""


def sample_topic(
    bootstrap: str,
    kafka: KafkaSettings | None,
    topic: str,
    limit: int,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[bytes | None]:
    """Up to ``limit`` message values of ``topic``, from the earliest offset of each partition
    to its end when reading starts. ``progress(read, expected)`` now and then.

    A partition's end is the high watermark of the sampling consumer's own first fetch of it:
    the listed end is only a lower bound (the embedded broker lists the last batch's base
    offset + 1), and a partition is never taken as read on it. :class:`BrokerUnavailable` when
    the broker brings neither a record nor an end for ``SLUICE_KAFKA_TIMEOUT_S`` before the
    sample is complete: a short sample is never passed off as the whole.
    """
    partitions = partitions_of(bootstrap, kafka, topic)
    if not partitions:
        raise UnknownTopic(f"no topic {topic!r} at {bootstrap}")
    timeout_s = (kafka or KafkaSettings()).timeout_s
    client = consumer(bootstrap, kafka, group_id=None, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        client.assign(tps)
        starts = beginning_offsets(client, tps)
        listed = end_offsets(client, tps)
        for tp in tps:
            client.seek(tp, starts[tp])
        ends: dict[TopicPartition, int] = {}  # from the first fetch of each that reported one
        left = set(tps)
        read = 0
        answered = time.monotonic()
        while left and read < limit:
            batches = client.poll(timeout_ms=int(POLL_S * 1000), max_records=min(500, limit - read))
            learned = _learn_ends(client, left, listed, ends)
            for tp, records in batches.items():
                end = ends.get(tp)
                for record in records:
                    if read >= limit:
                        break
                    if end is not None and record.offset >= end:  # written after reading started
                        continue
                    read += 1
                    yield record.value
            left = {tp for tp in left if tp not in ends or client.position(tp) < ends[tp]}
            if batches or learned:
                answered = time.monotonic()
            elif left and time.monotonic() - answered > timeout_s:
                unread = ", ".join(str(tp.partition) for tp in sorted(left))
                raise BrokerUnavailable(
                    f"sampling {topic}: partitions {unread} brought neither records nor their "
                    f"end within {timeout_s:g} s ({read} of up to {limit} messages read)"
                )
            if progress is not None:
                expected = sum(ends.get(tp, listed[tp]) - starts[tp] for tp in tps)
                progress(read, min(limit, expected))
    finally:
        client.close(timeout_ms=1000)


def _learn_ends(
    client: KafkaConsumer,
    left: set[TopicPartition],
    listed: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
) -> bool:
    """Record the end of each partition whose first fetch has now answered; whether any did."""
    learned = False
    for tp in left:
        if tp not in ends and (high := client.highwater(tp)) is not None:
            ends[tp] = max(high, listed[tp])
            learned = True
    return learned
