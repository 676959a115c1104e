"""librdkafka's messages of one poll as columns per partition (what a task is handed).

A poll of a few thousand messages went through a Python step per message and field; here each
field (the key and headers too, which a declaration may make columns) is read for all messages
by one C-level ``map`` over librdkafka's ``Message`` methods, and the partitions' runs
(librdkafka hands out runs of one partition) are cut with numpy. A poll with an error in it,
or more than one topic, goes through :func:`by_partition_each`, the exact per-message path, so
both give the same batches.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import pairwise
from operator import itemgetter
from typing import Any

import numpy as np
from kafka import TopicPartition

from pipelines.events.decode import RecordBatch

__all__ = ["by_partition", "by_partition_each"]

log = logging.getLogger(__name__)

_SECOND = itemgetter(1)
_NO_ERROR = {type(None)}


def by_partition(messages: Sequence[Any]) -> dict[TopicPartition, RecordBatch]:
    """``messages`` (confluent-kafka ``Message``s, in the order consumed) as a batch per
    partition, in consumed order within each; error messages logged and left out."""
    if not messages:
        return {}
    kind = type(messages[0])
    errors = set(map(type, map(kind.error, messages)))  # by type: KafkaError == None raises
    topics = set(map(kind.topic, messages))
    if errors != _NO_ERROR or len(topics) != 1:
        return by_partition_each(messages)
    (topic,) = topics
    partitions = list(map(kind.partition, messages))
    offsets = list(map(kind.offset, messages))
    stamps = list(map(_SECOND, map(kind.timestamp, messages)))
    values = list(map(kind.value, messages))
    keys = list(map(kind.key, messages))
    headers = list(map(kind.headers, messages))  # None without headers: ~10 ns a message
    runs = np.asarray(partitions, dtype=np.int64)
    cuts = (np.flatnonzero(runs[1:] != runs[:-1]) + 1).tolist()
    out: dict[TopicPartition, RecordBatch] = {}
    for lo, hi in pairwise([0, *cuts, len(messages)]):
        tp = TopicPartition(topic, partitions[lo])
        batch = out.get(tp)
        if batch is None:
            out[tp] = RecordBatch(
                offsets[lo:hi], stamps[lo:hi], values[lo:hi], keys[lo:hi], headers[lo:hi]
            )
            continue
        batch.offsets += offsets[lo:hi]
        batch.timestamps += stamps[lo:hi]
        batch.values += values[lo:hi]
        batch.keys += keys[lo:hi]
        batch.headers += headers[lo:hi]  # type: ignore[operator]  # always a list here
    return out


def by_partition_each(messages: Sequence[Any]) -> dict[TopicPartition, RecordBatch]:
    """:func:`by_partition` a message at a time (any poll: errors, several topics)."""
    out: dict[TopicPartition, RecordBatch] = {}
    # librdkafka hands out runs of one partition: switch columns only where a run ends.
    where: tuple[str, int] | None = None
    offsets = stamps = values = keys = headers = None
    for message in messages:
        if message.error() is not None:
            log.warning("read error: %s", message.error())
            continue
        here = (message.topic(), message.partition())
        if here != where:
            where = here
            tp = TopicPartition(*here)
            batch = out.get(tp)
            if batch is None:
                batch = out[tp] = RecordBatch([], [], [], [], [])
            offsets, stamps, values, keys, headers = (
                batch.offsets,
                batch.timestamps,
                batch.values,
                batch.keys,
                batch.headers,
            )
        offsets.append(message.offset())  # type: ignore[union-attr]
        stamps.append(message.timestamp()[1])  # type: ignore[union-attr]
        values.append(message.value())  # type: ignore[union-attr]
        keys.append(message.key())  # type: ignore[union-attr]
        headers.append(message.headers())  # type: ignore[union-attr]
    return out
