"""The control store: what workers report and what the control plane decides.

SQLite under the state directory by default (WAL, so several worker processes can write),
PostgreSQL (``postgresql+psycopg://...``, tested against a real server) for a fleet on several
machines; every upsert is the dialect's ``INSERT ... ON CONFLICT``, so concurrent writers of
one row do not race. Workers write their task metrics and
heartbeats here; `sluice status`, the lag evaluation and the autoscaler read them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    String,
    Table,
    Text,
    create_engine,
    event,
    select,
)
from sqlalchemy.engine import Engine

from pipelines.control.crashes import CrashLog
from pipelines.control.inputs import InputEndLog
from pipelines.control.jobs import JobModelStore
from pipelines.control.rescales import RescaleLog
from pipelines.control.schema import upgrade
from pipelines.control.sql import metadata, sqlite_pragmas, upsert

__all__ = ["VIEW_STATES", "ControlStore", "FleetSample", "TaskStatus"]


task_status = Table(
    "task_status",
    metadata,
    Column("task", String(255), primary_key=True),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("worker_id", String(64), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("consumed", Integer, nullable=False, default=0),
    Column("processed", Integer, nullable=False, default=0),
    Column("dead_lettered", Integer, nullable=False, default=0),
    Column("dropped_late", Integer, nullable=False, default=0),
    Column("busy_s", Float, nullable=False, default=0.0),
    Column("utilization", Float, nullable=False, default=0.0),
    Column("rate_in", Float, nullable=False, default=0.0),
    Column("next_offset", Integer, nullable=False, default=0),
    Column("end_offset", Integer, nullable=False, default=0),
    Column("backlog", Integer, nullable=False, default=0),
    Column("last_processed_ts", Float, nullable=True),
    Column("watermark", Float, nullable=True),
    Column("checkpointed_offset", Integer, nullable=True),
    Column("heartbeat_at", Float, nullable=False),
    Column("state", String(32), nullable=False),
    Column("views", Text, nullable=False, default="{}"),
    Column("generation", Integer, nullable=False, default=0),
    Column("state_bytes", BigInteger, nullable=False, default=0),
)

worker_status = Table(
    "worker_status",
    metadata,
    Column("worker_id", String(64), primary_key=True),
    Column("pid", Integer, nullable=False),
    Column("tasks", Text, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("state", String(32), nullable=False),
    Column("time_shares", Text, nullable=False, default="{}"),
)
"""Per worker: its tasks and where its time went over the last report (share of wall time)."""


view_deployments = Table(
    "view_deployments",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("fingerprint", Text, nullable=False),
    Column("definition", Text, nullable=False),
    Column("state", String(32), nullable=False),
    Column("deployed_at", Float, nullable=False),
    Column("crashes", Text, nullable=False, default="[]"),
)
"""The views the fleet should run, with Mist's states: Waiting, Scheduled, Running, Disabled."""

VIEW_STATES = ("Waiting", "Scheduled", "Running", "Disabled")

fleet_scaling = Table(
    "fleet_scaling",
    metadata,
    Column("topic", String(255), primary_key=True),
    Column("desired_workers", Integer, nullable=False),
    Column("reason", Text, nullable=False),
    Column("policy", String(64), nullable=False),
    Column("requested_at", Float, nullable=False),
    Column("applied_workers", Integer, nullable=True),
    Column("applied_at", Float, nullable=True),
)
"""Scaling requests (the queue of Metamarkets' Guardian) and what the fleet applied."""

fleet_samples = Table(
    "fleet_samples",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("sampled_at", Float, nullable=False, index=True),
    Column("topic", String(255), nullable=False),
    Column("workers", Integer, nullable=False),
    Column("tasks", Integer, nullable=False),
    Column("backlog", BigInteger, nullable=False),
    Column("max_time_lag_s", Float, nullable=True),
    Column("min_watermark_ms", BigInteger, nullable=True, index=True),
    Column("consumed", BigInteger, nullable=False),
)
"""The fleet's lag and size over time, so a report can draw them for a day of event time."""

rate_history = Table(
    "rate_history",
    metadata,
    Column("topic", String(255), primary_key=True),
    Column("minute", BigInteger, primary_key=True),
    Column("snapshot", Text, nullable=False),
)
"""One fleet-metrics snapshot per topic and minute (the minute's last), kept for days: the
history a live scaling policy reads, a season and more, as the simulator gives it."""


@dataclass
class TaskStatus:
    """One task's metrics as its worker last reported them."""

    task: str
    topic: str
    partition: int
    worker_id: str
    pid: int
    consumed: int = 0
    processed: int = 0
    dead_lettered: int = 0
    dropped_late: int = 0
    busy_s: float = 0.0
    utilization: float = 0.0
    rate_in: float = 0.0
    next_offset: int = 0
    end_offset: int = 0
    backlog: int = 0
    last_processed_ts: float | None = None
    watermark: float | None = None
    checkpointed_offset: int | None = None
    heartbeat_at: float = field(default_factory=time.time)
    state: str = "running"
    views: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    """The job-model generation of the owner that reported: an older one never overwrites."""
    state_bytes: int = 0
    """Window state in the task's last checkpoint (written or restored): what a move carries."""

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row["views"] = json.dumps(self.views)
        return row

    @classmethod
    def from_row(cls, row: Any) -> TaskStatus:
        data = dict(row._mapping)
        data["views"] = json.loads(data["views"] or "{}")
        return cls(**data)


@dataclass(frozen=True)
class FleetSample:
    """One look at a topic's fleet: its size, how far behind it is and how far it has got."""

    sampled_at: float
    """Wall-clock epoch seconds."""
    topic: str
    workers: int
    tasks: int
    backlog: int
    max_time_lag_s: float | None
    min_watermark_ms: int | None
    """The event time every task has reached (the slowest task's watermark)."""
    consumed: int

    @classmethod
    def from_row(cls, row: Any) -> FleetSample:
        data = dict(row._mapping)
        del data["id"]
        return cls(**data)


DEFAULT_TIMEOUT_S = 10.0
"""SLUICE_CONTROL_STORE_TIMEOUT_S's default, for stores opened without settings."""


def engine_options(url: str, timeout_s: float) -> dict[str, Any]:
    """Every wait of a connection bounded by ``timeout_s``: waiting for a pooled connection,
    connecting, and (PostgreSQL) each statement on the server and dead peers through TCP
    keepalives. A server that hangs mid-query while its kernel still answers is not bounded
    here: the caller's thread waits, and a stopping process gives up on it."""
    options: dict[str, Any] = {"future": True, "pool_pre_ping": True}
    if url.startswith("postgresql"):
        seconds = max(1, round(timeout_s))
        options["pool_timeout"] = timeout_s
        options["connect_args"] = {
            "connect_timeout": seconds,
            "options": f"-c statement_timeout={int(timeout_s * 1000)}",
            "keepalives": 1,
            "keepalives_idle": seconds,
            "keepalives_interval": max(1, seconds // 3),
            "keepalives_count": 3,
            "tcp_user_timeout": int(timeout_s * 1000),
        }
    elif url.startswith("sqlite"):
        options["connect_args"] = {"timeout": timeout_s}
    return options


class ControlStore:
    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.timeout_s = timeout_s
        self.engine: Engine = create_engine(url, **engine_options(url, timeout_s))
        if self.engine.dialect.name == "sqlite":
            busy_ms = int(timeout_s * 1000)
            event.listen(
                self.engine, "connect", lambda conn, record: sqlite_pragmas(conn, record, busy_ms)
            )
        upgrade(self.engine)
        self.jobs = JobModelStore(self.engine)
        """The job model: agents, task assignments with generations, leases."""
        self.rescales = RescaleLog(self.engine)
        """What each rescale paused, as the coordinator measured it."""
        self.crashes = CrashLog(self.engine)
        """Where tasks crashed, and the records quarantined for it."""
        self.input_ends = InputEndLog(self.engine)
        """Where each topic's bounded input (a finished replay) ended."""

    def report_tasks(self, statuses: list[TaskStatus]) -> None:
        """Upsert task rows in one transaction; a row reported by a newer generation of the
        task's owner is kept (a fenced owner's late report does not overwrite it)."""
        if not statuses:
            return
        with self.engine.begin() as conn:
            for status in statuses:
                row = status.row()
                del row["task"]
                upsert(
                    conn,
                    task_status,
                    {"task": status.task},
                    row,
                    only_if=task_status.c.generation <= status.generation,
                )

    def report_worker(
        self,
        worker_id: str,
        pid: int,
        tasks: list[str],
        state: str,
        time_shares: dict[str, float] | None = None,
    ) -> None:
        now = time.time()
        values = {"pid": pid, "tasks": json.dumps(tasks), "heartbeat_at": now, "state": state}
        values["time_shares"] = json.dumps(time_shares or {})
        with self.engine.begin() as conn:
            upsert(
                conn, worker_status, {"worker_id": worker_id}, values, on_insert={"started_at": now}
            )

    def forget_tasks(self, tasks: list[str]) -> None:
        """Remove the status rows of tasks that no longer exist (split or merged away)."""
        with self.engine.begin() as conn:
            conn.execute(task_status.delete().where(task_status.c.task.in_(tasks)))

    def tasks(self) -> list[TaskStatus]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(task_status).order_by(task_status.c.task)).all()
        return [TaskStatus.from_row(r) for r in rows]

    def workers(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(worker_status).order_by(worker_status.c.worker_id)).all()
        return [
            {
                **dict(r._mapping),
                "tasks": json.loads(r.tasks),
                "time_shares": json.loads(r.time_shares),
            }
            for r in rows
        ]

    def deploy_view(self, name: str, fingerprint: str, definition: dict[str, Any]) -> bool:
        """Record the definition the fleet should run; True if it changed (workers must reload)."""
        now = time.time()
        with self.engine.begin() as conn:
            current = conn.execute(
                select(view_deployments.c.fingerprint).where(view_deployments.c.name == name)
            ).scalar_one_or_none()
            if current == fingerprint:
                return False
            values = {
                "fingerprint": fingerprint,
                "definition": json.dumps(definition),
                "state": "Scheduled",
                "deployed_at": now,
            }
            upsert(conn, view_deployments, {"name": name}, values, on_insert={"crashes": "[]"})
            return True

    def set_view_state(self, name: str, state: str) -> None:
        """Set a deployed view's state; entering or leaving Disabled is a change of what runs,
        so it moves ``deployed_at`` (the newest change wins, :mod:`pipelines.views.resolve`)."""
        if state not in VIEW_STATES:
            raise ValueError(f"view state {state!r} is not one of {VIEW_STATES}")
        row = view_deployments.c
        with self.engine.begin() as conn:
            current = conn.execute(select(row.state).where(row.name == name)).scalar_one_or_none()
            values: dict[str, Any] = {"state": state}
            if current is not None and (current == "Disabled") != (state == "Disabled"):
                values["deployed_at"] = time.time()
            conn.execute(view_deployments.update().where(row.name == name).values(**values))

    def deployed_views(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(view_deployments).order_by(view_deployments.c.name)).all()
        return [
            {
                **dict(r._mapping),
                "definition": json.loads(r.definition),
                "crashes": json.loads(r.crashes),
            }
            for r in rows
        ]

    def request_workers(self, topic: str, workers: int, reason: str, policy: str) -> None:
        """Ask the fleet of ``topic`` to run ``workers`` workers; the newest request wins."""
        values = {
            "desired_workers": workers,
            "reason": reason,
            "policy": policy,
            "requested_at": time.time(),
        }
        with self.engine.begin() as conn:
            upsert(conn, fleet_scaling, {"topic": topic}, values)

    def record_applied(self, topic: str, workers: int) -> None:
        """The fleet runs ``workers`` workers now (also creates the row on first start)."""
        now = time.time()
        with self.engine.begin() as conn:
            upsert(
                conn,
                fleet_scaling,
                {"topic": topic},
                {"applied_workers": workers, "applied_at": now},
                on_insert={
                    "desired_workers": workers,
                    "reason": "fleet started",
                    "policy": "",
                    "requested_at": now,
                },
            )

    def scaling(self, topic: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(fleet_scaling).where(fleet_scaling.c.topic == topic)).first()
        return dict(row._mapping) if row else None

    def record_fleet_sample(self, sample: FleetSample, retain_s: float | None = None) -> None:
        """Append ``sample``; with ``retain_s``, drop samples older than that in the same go."""
        with self.engine.begin() as conn:
            conn.execute(fleet_samples.insert().values(**asdict(sample)))
            if retain_s is not None:
                cutoff = sample.sampled_at - retain_s
                conn.execute(fleet_samples.delete().where(fleet_samples.c.sampled_at < cutoff))

    def fleet_samples(
        self, topic: str | None, watermark_from_ms: int, watermark_to_ms: int
    ) -> list[FleetSample]:
        """Samples whose fleet watermark lies in ``[from, to)`` (of ``topic``, or all), oldest
        first: event time, so a replay's samples land on the day it replays."""
        query = select(fleet_samples).where(
            fleet_samples.c.min_watermark_ms >= watermark_from_ms,
            fleet_samples.c.min_watermark_ms < watermark_to_ms,
        )
        if topic is not None:
            query = query.where(fleet_samples.c.topic == topic)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(fleet_samples.c.sampled_at)).all()
        return [FleetSample.from_row(r) for r in rows]

    def record_rate(
        self, topic: str, at_s: float, snapshot: dict[str, Any], retain_s: float | None = None
    ) -> None:
        """Keep ``snapshot`` as the minute of ``at_s``'s (the newest of a minute wins); with
        ``retain_s``, drop minutes older than that in the same go."""
        minute = int(at_s // 60)
        with self.engine.begin() as conn:
            upsert(
                conn,
                rate_history,
                {"topic": topic, "minute": minute},
                {"snapshot": json.dumps(snapshot)},
            )
            if retain_s is not None:
                cutoff = int((at_s - retain_s) // 60)
                conn.execute(
                    rate_history.delete().where(
                        rate_history.c.topic == topic, rate_history.c.minute < cutoff
                    )
                )

    def rate_history(self, topic: str, since_s: float, until_s: float) -> list[dict[str, Any]]:
        """The per-minute snapshots of ``topic`` in ``[since_s, until_s)``, oldest first."""
        query = (
            select(rate_history.c.snapshot)
            .where(
                rate_history.c.topic == topic,
                rate_history.c.minute >= int(since_s // 60),
                rate_history.c.minute < int(until_s // 60),
            )
            .order_by(rate_history.c.minute)
        )
        with self.engine.connect() as conn:
            return [json.loads(row.snapshot) for row in conn.execute(query)]

    def close(self) -> None:
        self.engine.dispose()
