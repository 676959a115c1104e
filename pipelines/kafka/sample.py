"""Read a topic's first messages without joining a group or committing: what inference samples."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kafka import TopicPartition

from pipelines.config import KafkaSettings
from pipelines.exceptions import SluiceError
from pipelines.kafka.client import beginning_offsets, consumer, exact_end_offsets, partitions_of

__all__ = ["UnknownTopic", "sample_topic"]


class UnknownTopic(SluiceError):
    """The broker knows no topic of that name."""


def sample_topic(
    bootstrap: str,
    kafka: KafkaSettings | None,
    topic: str,
    limit: int,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[bytes | None]:
    """Up to ``limit`` message values of ``topic``, from the earliest offset of each partition,
    up to the end the broker lists when reading starts. ``progress(read, expected)`` now and
    then."""
    partitions = partitions_of(bootstrap, kafka, topic)
    if not partitions:
        raise UnknownTopic(f"no topic {topic!r} at {bootstrap}")
    exact_ends = exact_end_offsets(bootstrap, kafka, topic)
    client = consumer(bootstrap, kafka, group_id=None, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        client.assign(tps)
        starts = beginning_offsets(client, tps)
        ends = {tp: exact_ends.get(tp.partition, 0) for tp in tps}
        left = {tp: ends[tp] for tp in tps if ends[tp] > starts[tp]}
        for tp in tps:
            client.seek(tp, starts[tp])
        expected = min(limit, sum(ends[tp] - starts[tp] for tp in left))
        read = 0
        idle = 0
        while left and read < limit and idle < 20:
            batches = client.poll(timeout_ms=500, max_records=min(500, limit - read))
            idle = 0 if batches else idle + 1
            for tp, records in batches.items():
                for record in records:
                    if read >= limit:
                        break
                    if tp in left and record.offset >= left[tp]:
                        continue
                    read += 1
                    yield record.value
                if tp in left and client.position(tp) >= left[tp]:
                    del left[tp]
            if progress is not None:
                progress(read, expected)
    finally:
        client.close(timeout_ms=1000)
