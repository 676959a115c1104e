"""The job model in the control store: agents, task assignments with generations, leases.

Samza's job model and Mist's scheduler states, kept where every agent on every machine can
read them. A task's row says which agent owns it and under which *generation*; every move of a
task writes a new generation, and every write an owner makes is conditional on the generation
it holds, so an owner that was paused or partitioned and comes back is *fenced*: its
conditional writes match no row and its checkpoints lose to the newer generation's
(:mod:`pipelines.stream.checkpoint`). Per task and view, a crash count disables a view that
keeps failing without stopping the task's other views.

All changes are single conditional statements (or ``INSERT ... ON CONFLICT``) inside one
transaction, on SQLite and PostgreSQL alike; every state change is also appended to
``job_events`` with its time and reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Float, Integer, String, Table, Text, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from pipelines.control.crashes import task_crashes
from pipelines.control.sql import metadata, upsert

__all__ = [
    "AGENT_STATES",
    "TASK_STATES",
    "AgentRecord",
    "Assignment",
    "JobEvent",
    "JobModelStore",
    "TaskViewState",
]

TASK_STATES = ("Waiting", "Scheduled", "Running", "Disabled")
"""Mist's scheduler states: Waiting for an agent, Scheduled on one, Running there, Disabled."""

AGENT_STATES = ("running", "draining", "stopped", "lost")
"""``draining`` agents keep running what they have while it moves off; ``stopped`` agents
left gracefully; ``lost`` ones were seen dead by a supervisor before their heartbeat aged."""

agents = Table(
    "agents",
    metadata,
    Column("agent_id", String(128), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("topic", String(255), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("state", String(16), nullable=False),
)

task_assignments = Table(
    "task_assignments",
    metadata,
    Column("task", String(255), primary_key=True),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("agent_id", String(128), nullable=True),
    Column("generation", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("since", Float, nullable=False),
    Column("reason", Text, nullable=False),
    Column("handoff_to", String(128), nullable=True),
)

task_view_states = Table(
    "task_view_states",
    metadata,
    Column("task", String(255), primary_key=True),
    Column("view", String(255), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("since", Float, nullable=False),
    Column("reason", Text, nullable=False),
    Column("crashes", Text, nullable=False),
)

job_events = Table(
    "job_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False, index=True),
    Column("task", String(255), nullable=True),
    Column("view", String(255), nullable=True),
    Column("agent_id", String(128), nullable=True),
    Column("generation", Integer, nullable=True),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("term", Integer, nullable=False),
    Column("expires_at", Float, nullable=False),
)


@dataclass(frozen=True)
class AgentRecord:
    agent_id: str
    host: str
    pid: int
    topic: str
    started_at: float
    heartbeat_at: float
    state: str

    def heartbeat_age_s(self, now: float) -> float:
        return max(0.0, now - self.heartbeat_at)


@dataclass(frozen=True)
class Assignment:
    task: str
    topic: str
    partition: int
    agent_id: str | None
    generation: int
    state: str
    since: float
    reason: str
    handoff_to: str | None = None


@dataclass(frozen=True)
class TaskViewState:
    task: str
    view: str
    state: str
    since: float
    reason: str
    crashes: tuple[float, ...]


@dataclass(frozen=True)
class JobEvent:
    at: float
    task: str | None
    view: str | None
    agent_id: str | None
    generation: int | None
    state: str
    reason: str


class _Changed(Exception):
    """A conditional step of a multi-row change matched nothing: undo it all."""


def _insert_ignore(conn: Any, table: Table, row: dict[str, Any]) -> bool:
    """Insert ``row`` unless its key exists; True if inserted."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    key = table.primary_key.columns.values()[0]
    statement = dialect.insert(table).values(**row).on_conflict_do_nothing().returning(key)
    return conn.execute(statement).first() is not None


class JobModelStore:
    """Reads and conditional writes of the job model; one per :class:`ControlStore`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- agents --------------------------------------------------------------------------

    def register_agent(self, agent_id: str, host: str, pid: int, topic: str) -> list[str]:
        """(Re)register ``agent_id`` as running; a new incarnation owns nothing, so tasks its
        id still held go back to Waiting (they get a new generation when scheduled again).
        Returns those tasks."""
        now = time.time()
        with self.engine.begin() as conn:
            upsert(
                conn,
                agents,
                {"agent_id": agent_id},
                {
                    "host": host,
                    "pid": pid,
                    "topic": topic,
                    "started_at": now,
                    "heartbeat_at": now,
                    "state": "running",
                },
            )
            self._event(conn, now, None, None, agent_id, None, "registered", f"pid {pid} on {host}")
            return self._release_all(conn, agent_id, now, f"agent {agent_id} restarted")

    def heartbeat(self, agent_id: str) -> str | None:
        """Renew ``agent_id``'s heartbeat; its state (an operator may have set ``draining``),
        or None if its row is gone."""
        with self.engine.begin() as conn:
            conn.execute(
                agents.update()
                .where(agents.c.agent_id == agent_id)
                .values(heartbeat_at=time.time())
            )
            return conn.execute(
                select(agents.c.state).where(agents.c.agent_id == agent_id)
            ).scalar_one_or_none()

    def set_agent_state(self, agent_id: str, state: str, reason: str) -> bool:
        if state not in AGENT_STATES:
            raise ValueError(f"agent state {state!r} is not one of {AGENT_STATES}")
        now = time.time()
        with self.engine.begin() as conn:
            changed = conn.execute(
                agents.update().where(agents.c.agent_id == agent_id).values(state=state)
            ).rowcount
            if changed:
                self._event(conn, now, None, None, agent_id, None, state, reason)
            return bool(changed)

    def agents(self) -> list[AgentRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(agents).order_by(agents.c.agent_id)).all()
        return [AgentRecord(**r._mapping) for r in rows]

    # --- leases --------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> int | None:
        """Hold or renew lease ``name`` for ``ttl_s``: its term if ``holder`` has it now (a new
        holder starts a new term), None if someone else does and it has not expired."""
        now = time.time()
        c = leases.c
        with self.engine.begin() as conn:
            if _insert_ignore(
                conn, leases, {"name": name, "holder": holder, "term": 1, "expires_at": now + ttl_s}
            ):
                self._event(conn, now, None, None, holder, 1, "leader", f"took lease {name}")
                return 1
            previous = conn.execute(select(c.holder).where(c.name == name)).scalar_one()
            taken = conn.execute(
                leases.update()
                .where(c.name == name, or_(c.holder == holder, c.expires_at < now))
                .values(
                    holder=holder,
                    expires_at=now + ttl_s,
                    term=c.term + (0 if previous == holder else 1),
                )
            ).rowcount
            if not taken:
                return None
            term = conn.execute(select(c.term).where(c.name == name)).scalar_one()
            if previous != holder:
                self._event(
                    conn,
                    now,
                    None,
                    None,
                    holder,
                    term,
                    "leader",
                    f"took lease {name} from {previous}",
                )
            return term

    def release_lease(self, name: str, holder: str) -> None:
        """Give lease ``name`` up at once (a graceful stop), so the next holder need not wait."""
        with self.engine.begin() as conn:
            conn.execute(
                leases.update()
                .where(leases.c.name == name, leases.c.holder == holder)
                .values(expires_at=0.0)
            )

    def lease(self, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(leases).where(leases.c.name == name)).first()
        return dict(row._mapping) if row else None

    # --- assignments ---------------------------------------------------------------------

    def ensure_tasks(self, topic: str, partitions: list[int]) -> list[str]:
        """Add a task for each partition of ``topic`` that has none yet (of any key bucket),
        Waiting; returns them."""
        now = time.time()
        added = []
        c = task_assignments.c
        with self.engine.begin() as conn:
            held = set(conn.execute(select(c.partition).where(c.topic == topic)).scalars())
            for partition in partitions:
                if partition in held:
                    continue
                task = f"{topic}:{partition}"
                row = {
                    "task": task,
                    "topic": topic,
                    "partition": partition,
                    "agent_id": None,
                    "generation": 0,
                    "state": "Waiting",
                    "since": now,
                    "reason": "new task",
                    "handoff_to": None,
                }
                if _insert_ignore(conn, task_assignments, row):
                    self._event(conn, now, task, None, None, 0, "Waiting", "new task")
                    added.append(task)
        return added

    def replace_tasks(
        self, topic: str, old: dict[str, int], new: list[tuple[str, int]], reason: str
    ) -> bool:
        """Replace tasks that wait for a split or merge (``old``: task -> generation, each
        Waiting with its ``handoff_to`` a ``@`` mark) by ``new`` (task, partition), Waiting at
        the highest old generation; all or nothing. False if any old task changed meanwhile."""
        now = time.time()
        generation = max(old.values())
        try:
            with self.engine.begin() as conn:
                self._replace(conn, topic, old, new, reason, generation, now)
        except _Changed:
            return False
        return True

    def _replace(
        self,
        conn: Any,
        topic: str,
        old: dict[str, int],
        new: list[tuple[str, int]],
        reason: str,
        generation: int,
        now: float,
    ) -> None:
        c = task_assignments.c
        for task, held in old.items():
            gone = conn.execute(
                task_assignments.delete().where(
                    c.task == task,
                    c.generation == held,
                    c.state == "Waiting",
                    c.handoff_to.like("@%"),
                )
            ).rowcount
            if not gone:
                raise _Changed(task)
            self._event(conn, now, task, None, None, held, "Retired", reason)
        for task, partition in new:
            row = {
                "task": task,
                "topic": topic,
                "partition": partition,
                "agent_id": None,
                "generation": generation,
                "state": "Waiting",
                "since": now,
                "reason": reason,
                "handoff_to": None,
            }
            if not _insert_ignore(conn, task_assignments, row):
                raise _Changed(task)
            self._event(conn, now, task, None, None, generation, "Waiting", reason)

    def assignments(self, topic: str | None = None) -> list[Assignment]:
        query = select(task_assignments).order_by(task_assignments.c.task)
        if topic is not None:
            query = query.where(task_assignments.c.topic == topic)
        with self.engine.connect() as conn:
            return [Assignment(**r._mapping) for r in conn.execute(query).all()]

    def assignments_of(self, agent_id: str) -> list[Assignment]:
        query = select(task_assignments).where(task_assignments.c.agent_id == agent_id)
        with self.engine.connect() as conn:
            return [Assignment(**r._mapping) for r in conn.execute(query).all()]

    def schedule(self, task: str, generation: int, agent_id: str, reason: str) -> int | None:
        """Waiting -> Scheduled on ``agent_id`` with the next generation, if ``task`` is still
        Waiting at ``generation``; the new generation, or None if it changed meanwhile."""
        c = task_assignments.c
        now = time.time()
        with self.engine.begin() as conn:
            moved = conn.execute(
                task_assignments.update()
                .where(c.task == task, c.generation == generation, c.state == "Waiting")
                .values(
                    agent_id=agent_id,
                    generation=generation + 1,
                    state="Scheduled",
                    since=now,
                    reason=reason,
                    handoff_to=None,
                )
            ).rowcount
            if not moved:
                return None
            self._event(conn, now, task, None, agent_id, generation + 1, "Scheduled", reason)
            return generation + 1

    def unassign(self, task: str, generation: int, agent_id: str, reason: str) -> bool:
        """Scheduled/Running on ``agent_id`` -> Waiting (its owner is lost): conditional on the
        generation, so a task that moved meanwhile is left alone."""
        return self._to_waiting(task, generation, agent_id, reason, keep_handoff=False)

    def request_handoff(self, task: str, generation: int, to_agent: str, reason: str) -> bool:
        """Ask ``task``'s owner to stop it at a checkpoint and release it for ``to_agent``."""
        c = task_assignments.c
        with self.engine.begin() as conn:
            asked = conn.execute(
                task_assignments.update()
                .where(c.task == task, c.generation == generation, c.state == "Running")
                .values(handoff_to=to_agent, reason=reason)
            ).rowcount
            if asked:
                self._event(conn, time.time(), task, None, None, generation, "Running", reason)
            return bool(asked)

    def cancel_handoff(self, task: str, generation: int, reason: str) -> bool:
        """Clear the split or merge mark (``@...``) of ``task`` at ``generation``, Waiting (it
        is then scheduled as it is) or still Running (its owner goes on); the history records
        ``Cancelled`` and why.
        False if the task changed meanwhile. Only for a step whose storage rewrite has not run:
        the coordinator decides that (:mod:`orchestration.control_plane.fleet.rebucketing`)."""
        c = task_assignments.c
        now = time.time()
        with self.engine.begin() as conn:
            cancelled = conn.execute(
                task_assignments.update()
                .where(
                    c.task == task,
                    c.generation == generation,
                    c.state.in_(("Waiting", "Running")),
                    c.handoff_to.like("@%"),
                )
                .values(handoff_to=None, reason=reason)
                .returning(c.state)
            ).scalar_one_or_none()
            if cancelled is None:
                return False
            self._event(conn, now, task, None, None, generation, "Cancelled", reason)
            return True

    def mark_running(self, task: str, agent_id: str, generation: int, reason: str) -> bool:
        """The owner restored ``task`` and runs it; False if it is no longer the owner."""
        c = task_assignments.c
        now = time.time()
        with self.engine.begin() as conn:
            marked = conn.execute(
                task_assignments.update()
                .where(c.task == task, c.agent_id == agent_id, c.generation == generation)
                .values(state="Running", since=now, reason=reason)
            ).rowcount
            if marked:
                self._event(conn, now, task, None, agent_id, generation, "Running", reason)
            return bool(marked)

    def release(self, task: str, agent_id: str, generation: int, reason: str) -> bool:
        """The owner stopped ``task`` at a checkpoint: Waiting again, keeping the hand-off's
        target so the scheduler gives it there."""
        return self._to_waiting(task, generation, agent_id, reason, keep_handoff=True)

    def owns(self, agent_id: str, task: str, generation: int) -> bool:
        """The fence: True while ``agent_id`` owns ``task`` at ``generation``."""
        c = task_assignments.c
        with self.engine.connect() as conn:
            row = conn.execute(select(c.agent_id, c.generation).where(c.task == task)).first()
        return row is not None and row.agent_id == agent_id and row.generation == generation

    def _to_waiting(
        self, task: str, generation: int, agent_id: str, reason: str, keep_handoff: bool
    ) -> bool:
        c = task_assignments.c
        now = time.time()
        values: dict[str, Any] = {"agent_id": None, "state": "Waiting", "since": now}
        values["reason"] = reason
        if not keep_handoff:
            values["handoff_to"] = None
        with self.engine.begin() as conn:
            moved = conn.execute(
                task_assignments.update()
                .where(
                    c.task == task,
                    c.generation == generation,
                    c.agent_id == agent_id,
                    c.state.in_(("Scheduled", "Running")),
                )
                .values(**values)
            ).rowcount
            if moved:
                self._event(conn, now, task, None, agent_id, generation, "Waiting", reason)
            return bool(moved)

    def _release_all(self, conn: Any, agent_id: str, now: float, reason: str) -> list[str]:
        c = task_assignments.c
        held = conn.execute(
            select(c.task, c.generation).where(
                c.agent_id == agent_id, c.state.in_(("Scheduled", "Running"))
            )
        ).all()
        released = []
        for row in held:
            moved = conn.execute(
                task_assignments.update()
                .where(c.task == row.task, c.generation == row.generation)
                .values(agent_id=None, state="Waiting", since=now, reason=reason, handoff_to=None)
            ).rowcount
            if moved:
                self._event(conn, now, row.task, None, agent_id, row.generation, "Waiting", reason)
                released.append(row.task)
        return released

    def set_task_state(self, task: str, state: str, reason: str) -> bool:
        """An operator's change: Disabled stops ``task`` wherever it runs, Waiting (re)enables
        it with a new generation on its next scheduling."""
        if state not in ("Waiting", "Disabled"):
            raise ValueError(f"an operator sets a task Waiting or Disabled, not {state!r}")
        c = task_assignments.c
        now = time.time()
        with self.engine.begin() as conn:
            changed = conn.execute(
                task_assignments.update()
                .where(c.task == task)
                .values(
                    agent_id=None,
                    state=state,
                    since=now,
                    reason=reason,
                    handoff_to=None,
                    generation=c.generation + 1,
                )
            ).rowcount
            if changed:
                self._event(conn, now, task, None, None, None, state, reason)
            return bool(changed)

    # --- views per task --------------------------------------------------------------------

    def record_view_crash(
        self,
        task: str,
        view: str,
        reason: str,
        limit: int = 3,
        window_s: float = 600.0,
        *,
        counted: Sequence[float] | None = None,
        at_fault: bool = False,
    ) -> bool:
        """Count a crash of ``view`` on ``task``; True if it is now Disabled there (``limit``
        crashes within ``window_s``, Mist's rule).

        ``counted``, if given, are the times of the crashes that count (the crash log's, where
        crashes a quarantine explains are left out: :meth:`pipelines.control.CrashLog.verdict`)
        instead of this row's own list; ``at_fault`` disables the view whatever the count (it
        had more records quarantined than the limit: it fails on everything)."""
        now = time.time()
        c = task_view_states.c
        with self.engine.begin() as conn:
            row = conn.execute(
                select(task_view_states).where(c.task == task, c.view == view)
            ).first()
            if counted is not None:
                crashes = [t for t in counted if now - t <= window_s]
            else:
                crashes = [t for t in json.loads(row.crashes) if now - t <= window_s] if row else []
                crashes.append(now)
            disabled = len(crashes) >= limit or at_fault
            state = "Disabled" if disabled else "Running"
            why = (
                f"more than {limit} records quarantined in {window_s / 60:.0f} min, last: {reason}"
                if at_fault
                else f"{len(crashes)} crashes in {window_s / 60:.0f} min, last: {reason}"
                if disabled
                else f"crashed ({len(crashes)} of {limit} in {window_s / 60:.0f} min): {reason}"
            )
            upsert(
                conn,
                task_view_states,
                {"task": task, "view": view},
                {"state": state, "since": now, "reason": why, "crashes": json.dumps(crashes)},
            )
            self._event(conn, now, task, view, None, None, state, why)
            return disabled

    def enable_view(self, task: str, view: str, reason: str) -> bool:
        """Re-enable ``view`` on ``task`` and forget its crashes (a recovery op), those of the
        crash log too: they would count against it again at its next crash."""
        now = time.time()
        c = task_view_states.c
        with self.engine.begin() as conn:
            changed = conn.execute(
                task_view_states.update()
                .where(c.task == task, c.view == view)
                .values(state="Running", since=now, reason=reason, crashes="[]")
            ).rowcount
            conn.execute(
                task_crashes.delete().where(
                    task_crashes.c.task == task, task_crashes.c.view == view
                )
            )
            if changed:
                self._event(conn, now, task, view, None, None, "Running", reason)
            return bool(changed)

    def view_states(self, task: str | None = None) -> list[TaskViewState]:
        query = select(task_view_states).order_by(task_view_states.c.task, task_view_states.c.view)
        if task is not None:
            query = query.where(task_view_states.c.task == task)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            TaskViewState(**{**r._mapping, "crashes": tuple(json.loads(r.crashes))}) for r in rows
        ]

    def disabled_views(self, task: str) -> set[str]:
        return {s.view for s in self.view_states(task) if s.state == "Disabled"}

    # --- history -------------------------------------------------------------------------

    def note(
        self, task: str | None, agent_id: str, generation: int | None, state: str, reason: str
    ) -> None:
        """Append what an agent saw (e.g. ``Fenced``) to the history; the model is unchanged."""
        with self.engine.begin() as conn:
            self._event(conn, time.time(), task, None, agent_id, generation, state, reason)

    def events(self, task: str | None = None, limit: int = 200) -> list[JobEvent]:
        """The newest ``limit`` state changes (of ``task``), oldest first."""
        query = select(job_events).order_by(job_events.c.id.desc()).limit(limit)
        if task is not None:
            query = query.where(job_events.c.task == task)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            JobEvent(**{k: v for k, v in r._mapping.items() if k != "id"}) for r in reversed(rows)
        ]

    def events_since(self, at: float, limit: int = 10_000) -> list[JobEvent]:
        """State changes at or after ``at``, oldest first (at most ``limit``)."""
        query = (
            select(job_events).where(job_events.c.at >= at).order_by(job_events.c.id).limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [JobEvent(**{k: v for k, v in r._mapping.items() if k != "id"}) for r in rows]

    @staticmethod
    def _event(
        conn: Any,
        at: float,
        task: str | None,
        view: str | None,
        agent_id: str | None,
        generation: int | None,
        state: str,
        reason: str,
    ) -> None:
        conn.execute(
            job_events.insert().values(
                at=at,
                task=task,
                view=view,
                agent_id=agent_id,
                generation=generation,
                state=state,
                reason=reason,
            )
        )
