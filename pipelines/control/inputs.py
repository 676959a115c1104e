"""Where a bounded input ended: the end offsets a finished replay left on its topic.

A stream that stops never moves its watermark past its last hour, so the archive sensor
closes that hour only after the fleet has stood still for ``idle_close_s``: a guess that the
input is over. A bounded source knows it is (Flink's bounded sources emit a final watermark
for this). `sluice generate` records the topic's exact end offsets here when its replay is
over, and clears them when a replay starts, so the sensor can close the last hours as soon
as every task has checkpointed through those offsets, which also proves the hour's archive
written (a worker idling at the mark checkpoints at once). Anything produced after the mark
voids it: a task that has seen a log end past it falls back to the idle rule.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Column, Float, String, Table, Text, select
from sqlalchemy.engine import Engine

from pipelines.control.sql import metadata, upsert

__all__ = ["InputEnd", "InputEndLog", "TaskProgress"]

input_ends = Table(
    "input_ends",
    metadata,
    Column("topic", String(255), primary_key=True),
    Column("end_offsets", Text, nullable=False),
    Column("recorded_at", Float, nullable=False),
)


class TaskProgress(Protocol):
    """What :meth:`InputEnd.reached_by` needs of a task's reported status."""

    partition: int
    end_offset: int
    checkpointed_offset: int | None


@dataclass(frozen=True)
class InputEnd:
    """The end of one topic's bounded input: the next offset of each partition after it."""

    topic: str
    end_offsets: Mapping[int, int]
    recorded_at: float

    def reached_by(self, tasks: Iterable[TaskProgress]) -> bool:
        """Whether ``tasks`` (the topic's) have durably processed the whole input: every
        partition of the mark has a task, each task checkpointed through its partition's end,
        and none has seen a log end past it (later input voids the mark)."""
        tasks = list(tasks)
        covered = {t.partition for t in tasks}
        if not tasks or not covered >= set(self.end_offsets):
            return False
        for t in tasks:
            end = self.end_offsets.get(t.partition)
            if end is None or t.end_offset > end or (t.checkpointed_offset or 0) < end:
                return False
        return True

    def awaits_checkpoint(self, partition: int, next_offset: int, checkpointed: int | None) -> bool:
        """Whether a task of ``partition`` has read the input to its end but not checkpointed
        through it (what :meth:`reached_by` still waits for from it)."""
        end = self.end_offsets.get(partition)
        return end is not None and next_offset >= end > (checkpointed or 0)


class InputEndLog:
    """Record, clear and read the end of each topic's bounded input (one row per topic)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, topic: str, end_offsets: Mapping[int, int], at: float | None = None) -> None:
        values = {
            "end_offsets": json.dumps({str(p): int(o) for p, o in sorted(end_offsets.items())}),
            "recorded_at": time.time() if at is None else at,
        }
        with self.engine.begin() as conn:
            upsert(conn, input_ends, {"topic": topic}, values)

    def clear(self, topic: str) -> None:
        """The topic's input is open again (a replay started)."""
        with self.engine.begin() as conn:
            conn.execute(input_ends.delete().where(input_ends.c.topic == topic))

    def of_topic(self, topic: str) -> InputEnd | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(input_ends).where(input_ends.c.topic == topic)).first()
        if row is None:
            return None
        ends = {int(p): int(o) for p, o in json.loads(row.end_offsets).items()}
        return InputEnd(row.topic, ends, row.recorded_at)
