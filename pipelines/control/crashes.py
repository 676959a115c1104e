"""Where a task crashed: the offset ranges that killed it, and the records quarantined for it.

A task whose batch raises is dropped without writing and restarted from its checkpoint. The
crash is kept here (task, view if one was named, the batch's offsets, the traceback's last
line), so the next start of the task, on any agent, knows which offsets are suspect and
processes them one record at a time. A record that crashes the task again, alone, has been
seen to crash it twice: it is *quarantined*, dead-lettered as ``crashed_task`` and skipped
from then on. A quarantine is matched on the record's offset and Kafka timestamp both, so a
recreated topic's new record at an old offset is not mistaken for it.

The same rows decide Mist's rule for views (:meth:`CrashLog.verdict`): a crash that a
quarantine explains (its range holds a quarantined record) does not count toward disabling
the view; a view with more quarantines than the crash limit within the window fails on
everything and is disabled.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from sqlalchemy import BigInteger, Column, Float, Integer, String, Table, Text, select
from sqlalchemy.engine import Engine

from pipelines.control.sql import metadata

__all__ = ["CrashLog", "CrashPlan", "TaskCrash", "ViewVerdict", "crash_plan"]

task_crashes = Table(
    "task_crashes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task", String(255), nullable=False, index=True),
    Column("at", Float, nullable=False),
    Column("agent_id", String(128), nullable=True),
    Column("generation", Integer, nullable=True),
    Column("view", String(255), nullable=True),
    Column("first_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("record_ts", BigInteger, nullable=True),
    Column("error", Text, nullable=False),
)

RECENT = 200
"""Crashes of a task read at its start (the newest): more means something else is wrong."""


@dataclass(frozen=True)
class TaskCrash:
    """One crash of a task while it processed offsets ``[first_offset, end_offset)``."""

    task: str
    first_offset: int
    end_offset: int
    error: str
    """The traceback's last line (``Type: message``)."""
    view: str | None = None
    """The view whose update raised; None if it was not a view's (the task's own code)."""
    record_ts: int | None = None
    """The Kafka timestamp of the record, when the range is one record."""
    agent_id: str | None = None
    generation: int | None = None
    at: float = field(default_factory=time.time)

    def covers(self, offset: int) -> bool:
        return self.first_offset <= offset < self.end_offset

    @property
    def single(self) -> bool:
        return self.end_offset == self.first_offset + 1

    def detail(self) -> str:
        """What a quarantined record's dead letter says."""
        where = f"view {self.view}" if self.view else "the task (no view named)"
        return f"crashed {where} twice: {self.error}"[:1000]


@dataclass(frozen=True)
class CrashPlan:
    """How a task starts after crashes: ranges to take one record at a time, records to skip."""

    suspects: tuple[tuple[int, int], ...] = ()
    """Merged ``[first, end)`` ranges some crash covered that no quarantine explains,
    ascending."""
    quarantined: dict[int, TaskCrash] = field(default_factory=dict)
    """Offset -> the crash of that record alone that quarantined it."""

    def __bool__(self) -> bool:
        return bool(self.suspects or self.quarantined)

    def suspect(self, offset: int) -> bool:
        return any(first <= offset < end for first, end in self.suspects)


def crash_plan(crashes: Sequence[TaskCrash]) -> CrashPlan:
    """Suspect ranges and quarantined records from a task's crashes: a record is quarantined
    when it crashed the task alone (processed alone, so its timestamp is known) and another
    crash covered it too (the second crash covering the same offset)."""
    quarantined = {}
    # a record processed alone has its timestamp (a batch of one has not); the newest such
    # crash of an offset wins (an older one may be of another record: a recreated topic)
    for crash in crashes:
        offset = crash.first_offset
        if (
            crash.single
            and crash.record_ts is not None
            and sum(c.covers(offset) for c in crashes) > 1
        ):
            quarantined[offset] = crash
    # a crash whose offsets hold a quarantined record is explained: its other records go in
    # whole batches again (another bad one among them crashes anew, and is isolated then)
    ranges = sorted(
        (c.first_offset, c.end_offset) for c in crashes if not any(c.covers(o) for o in quarantined)
    )
    merged: list[tuple[int, int]] = []
    for first, end in ranges:
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((first, end))
    return CrashPlan(tuple(merged), quarantined)


@dataclass(frozen=True)
class ViewVerdict:
    """Mist's rule for one view of a task, over the crash window."""

    counted: tuple[float, ...]
    """Times of the view's crashes that no quarantine explains: they count toward disabling."""
    quarantines: int
    """Records quarantined for this view."""

    def disables(self, limit: int) -> bool:
        return len(self.counted) >= limit or self.quarantines > limit


class CrashLog:
    """Append and read task crashes (one table, any dialect)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, crash: TaskCrash) -> None:
        with self.engine.begin() as conn:
            conn.execute(task_crashes.insert().values(**asdict(crash)))

    def of_task(self, task: str, limit: int = RECENT) -> list[TaskCrash]:
        """The newest ``limit`` crashes of ``task``, oldest first."""
        c = task_crashes.c
        query = select(task_crashes).where(c.task == task).order_by(c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_crash(r) for r in reversed(rows)]

    def recent(self, since: float) -> list[TaskCrash]:
        """Every crash at or after ``since`` (for status), oldest first."""
        c = task_crashes.c
        query = select(task_crashes).where(c.at >= since).order_by(c.id)
        with self.engine.connect() as conn:
            return [_crash(r) for r in conn.execute(query).all()]

    def verdict(self, task: str, view: str, window_s: float, now: float | None = None):
        """Mist's rule for ``view`` on ``task`` from the crash log (see the module's doc)."""
        now = time.time() if now is None else now
        crashes = self.of_task(task)
        plan = crash_plan(crashes)
        recent = [c for c in crashes if c.view == view and now - c.at <= window_s]
        counted = tuple(c.at for c in recent if not any(c.covers(o) for o in plan.quarantined))
        quarantines = sum(
            1 for c in plan.quarantined.values() if c.view == view and now - c.at <= window_s
        )
        return ViewVerdict(counted, quarantines)


def _crash(row) -> TaskCrash:
    return TaskCrash(**{k: v for k, v in row._mapping.items() if k != "id"})
