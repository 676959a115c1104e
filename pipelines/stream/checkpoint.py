"""A task's checkpoint: its window state and the next offset, as one atomic object.

The checkpoint is the source of truth for where a task resumes; the offset committed to the
Kafka consumer group mirrors it for external lag tools and is never ahead of it.

Each owner generation of the job model writes its own object and the highest generation wins
on restore: the fencing token lives in the key, so an owner that was paused past its lease and
comes back cannot replace what a newer owner wrote, even on a store without conditional
writes. Older generations' objects are removed after a newer one is written.

The object is one Parquet table, a row per view: ``view``, ``state`` (the Parquet bytes of the
view's open windows or sessions) and, since session views, ``pending`` (the Parquet bytes of
the events a session view accepted but has not folded into sessions yet, null for windowed
views). The extension is compatible within format 1: a checkpoint without the column reads as
one where nothing is pending, and windowed views never write anything into it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipelines.exceptions import CheckpointError
from pipelines.segments import (
    checkpoint_generation,
    checkpoint_key,
    checkpoint_prefix,
    legacy_checkpoint_key,
    read_parquet,
    to_parquet,
)
from pipelines.storage import ObjectStore

__all__ = ["TaskCheckpoint", "delete_checkpoints", "load_checkpoint", "save_checkpoint"]

FORMAT_VERSION = 1


@dataclass
class TaskCheckpoint:
    topic: str
    partition: int
    next_offset: int
    watermark: int
    consumed: int
    dead_lettered: dict[str, int]
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per view: fingerprint, processed, late."""
    states: dict[str, bytes] = field(default_factory=dict)
    """Per view: the Parquet bytes of its open windows or sessions (``all_table``)."""
    pending: dict[str, bytes] = field(default_factory=dict)
    """Per session view: the Parquet bytes of its unsettled events (``pending_table``)."""
    generation: int = 0
    """The job-model generation of the owner that wrote it."""
    bucket: int = 0
    factor: int = 1
    skips: tuple[tuple[int, int, int], ...] = ()
    """(bucket, factor, until): records of that bucket below ``until`` are already counted."""
    replay_until: int = 0
    """The realtime files already reflect the partition up to this offset (an earlier owner
    flushed that far before it stopped): a restored task rewrites none of them before it
    gets there, so served results never go back while it replays."""
    type_errors: dict[str, Any] = field(default_factory=dict)
    """Per field and reason, messages dead-lettered and values made null
    (:mod:`pipelines.stream.type_errors`' JSON)."""
    offset_resets: int = 0
    """How often the task's offset was out of the log's range and moved to its start (records
    lost to retention, or a recreated topic): kept across restarts, shown by status."""

    @property
    def state_bytes(self) -> int:
        """What the task's state weighs (windows, sessions and pending events): what a move
        carries."""
        return sum(map(len, self.states.values())) + sum(map(len, self.pending.values()))


def save_checkpoint(store: ObjectStore, checkpoint: TaskCheckpoint) -> None:
    header = {
        "format": FORMAT_VERSION,
        "topic": checkpoint.topic,
        "partition": checkpoint.partition,
        "next_offset": checkpoint.next_offset,
        "watermark": checkpoint.watermark,
        "consumed": checkpoint.consumed,
        "dead_lettered": checkpoint.dead_lettered,
        "views": checkpoint.views,
        "generation": checkpoint.generation,
        "bucket": checkpoint.bucket,
        "factor": checkpoint.factor,
        "skips": [list(s) for s in checkpoint.skips],
        "replay_until": checkpoint.replay_until,
        "offset_resets": checkpoint.offset_resets,
        "type_errors": checkpoint.type_errors,
    }
    names = sorted(checkpoint.states)
    table = pa.table(
        {
            "view": names,
            "state": [checkpoint.states[n] for n in names],
            "pending": [checkpoint.pending.get(n) for n in names],
        },
        schema=pa.schema(
            [
                pa.field("view", pa.string()),
                pa.field("state", pa.binary()),
                pa.field("pending", pa.binary()),
            ],
            metadata={"sluice_checkpoint": json.dumps(header)},
        ),
    )
    task = (checkpoint.topic, checkpoint.partition)
    where = (checkpoint.bucket, checkpoint.factor)
    store.put(checkpoint_key(*task, checkpoint.generation, *where), to_parquet(table))
    for key, generation in _generations(store, *task, *where):
        if generation < checkpoint.generation:
            store.delete(key)


def delete_checkpoints(
    store: ObjectStore, topic: str, partition: int, bucket: int = 0, factor: int = 1
) -> None:
    """Remove every checkpoint of a task that no longer exists (split or merged away)."""
    for key, _ in _generations(store, topic, partition, bucket, factor):
        store.delete(key)
    if factor == 1:
        store.delete(legacy_checkpoint_key(topic, partition))


def _generations(
    store: ObjectStore, topic: str, partition: int, bucket: int = 0, factor: int = 1
) -> list[tuple[str, int]]:
    """(key, generation) of every checkpoint object of a task, newest generation last."""
    found = [
        (key, generation)
        for key in store.list(checkpoint_prefix(topic, partition, bucket, factor))
        if (generation := checkpoint_generation(key)) is not None
    ]
    return sorted(found, key=lambda item: item[1])


def load_checkpoint(
    store: ObjectStore, topic: str, partition: int, bucket: int = 0, factor: int = 1
) -> TaskCheckpoint | None:
    """The newest generation's checkpoint of a task (or one written before generations)."""
    generations = _generations(store, topic, partition, bucket, factor)
    if generations:
        key = generations[-1][0]
    elif factor == 1:
        key = legacy_checkpoint_key(topic, partition)
    else:
        return None
    try:
        data = store.get(key)
    except FileNotFoundError:
        return None
    try:
        table = read_parquet(data)
        header = json.loads(table.schema.metadata[b"sluice_checkpoint"])
    except (pa.ArrowException, KeyError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {store.uri(key)} is unreadable: {exc}") from exc
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {store.uri(key)} has format {header.get('format')}, "
            f"this Sluice reads format {FORMAT_VERSION}"
        )
    views = table.column("view").to_pylist()
    states = dict(zip(views, table.column("state").to_pylist(), strict=True))
    pending = {}
    if "pending" in table.schema.names:  # written since session views; absent = none pending
        pending = {
            v: data
            for v, data in zip(views, table.column("pending").to_pylist(), strict=True)
            if data is not None
        }
    return TaskCheckpoint(
        topic=header["topic"],
        partition=header["partition"],
        next_offset=header["next_offset"],
        watermark=header["watermark"],
        consumed=header["consumed"],
        dead_lettered=header["dead_lettered"],
        views=header["views"],
        states=states,
        pending=pending,
        generation=header.get("generation", 0),
        bucket=header.get("bucket", 0),
        factor=header.get("factor", 1),
        skips=tuple(tuple(s) for s in header.get("skips", ())),
        replay_until=header.get("replay_until", 0),
        offset_resets=header.get("offset_resets", 0),
        type_errors=header.get("type_errors", {}),
    )
