"""What each rescale of a fleet really cost: the record the autoscaler fits its pause from.

A planner that prices a rescale with a constant is wrong both ways: a real pause grows with the
number of tasks that move and with the state each one carries through its checkpoint. The
coordinator measures every rescale it carries out
(:mod:`orchestration.control_plane.fleet.rescales`) and appends one row here; the autoscaler sensor
fits the per-task and per-megabyte pause from the newest rows
(:mod:`orchestration.control_plane.autoscaling.pause`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import BigInteger, Column, Float, Integer, String, Table, select
from sqlalchemy.engine import Engine

from pipelines.control.sql import metadata

__all__ = ["RescaleLog", "RescaleRecord"]

rescales = Table(
    "rescales",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("topic", String(255), nullable=False, index=True),
    Column("started_at", Float, nullable=False),
    Column("settled_at", Float, nullable=False),
    Column("from_agents", Integer, nullable=False),
    Column("to_agents", Integer, nullable=False),
    Column("tasks_moved", Integer, nullable=False),
    Column("state_bytes", BigInteger, nullable=False),
    Column("pause_s", Float, nullable=False),
    Column("task_pause_s", Float, nullable=False),
    Column("max_task_pause_s", Float, nullable=False),
)


@dataclass(frozen=True)
class RescaleRecord:
    """One rescale, from the first task stopped to the last moved task processing again."""

    topic: str
    started_at: float
    """When the first moved task was stopped (its hand-off asked for, or its release)."""
    settled_at: float
    """When the last moved task was running on its new agent."""
    from_agents: int
    to_agents: int
    tasks_moved: int
    state_bytes: int
    """Window state the moved tasks carried (their checkpoints' state), bytes."""
    pause_s: float
    """Wall time from ``started_at`` to ``settled_at``: how long the rescale was under way."""
    task_pause_s: float
    """Sum over moved tasks of the time each stood still: the processing the rescale lost."""
    max_task_pause_s: float

    @property
    def state_mb(self) -> float:
        return self.state_bytes / 1e6


class RescaleLog:
    """Append and read rescale records (one table, any dialect)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, record: RescaleRecord) -> None:
        with self.engine.begin() as conn:
            conn.execute(rescales.insert().values(**asdict(record)))

    def recent(self, topic: str | None = None, limit: int = 50) -> list[RescaleRecord]:
        """The newest ``limit`` records (of ``topic``, or all), oldest first."""
        query = select(rescales).order_by(rescales.c.id.desc()).limit(limit)
        if topic is not None:
            query = query.where(rescales.c.topic == topic)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            RescaleRecord(**{k: v for k, v in r._mapping.items() if k != "id"})
            for r in reversed(rows)
        ]
