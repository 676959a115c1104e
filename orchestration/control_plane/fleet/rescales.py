"""The coordinator's stopwatch: how long each rescale stopped the tasks it moved.

A rescale begins when the number of running agents changes and ends when the job model has
settled again (every task Running on a running agent, no hand-off pending, nothing left to
balance). What it cost is read from the job model's own history, the same on every host:

- a moved task *stopped* when its hand-off was asked for, or, for an agent that left, when it
  released the task at its final checkpoint (the checkpoint itself is not counted then);
- it *resumed* when its new owner marked it Running after restoring that checkpoint.

A fleet that lost an agent (no heartbeat, killed) is recovering, not rescaling: its tasks waited for
the loss to be noticed, which says nothing about a planned rescale, so it is not recorded. Each
record goes to the control store (:mod:`pipelines.control.rescales`), where the lag sensor fits the
planner's pause from them (:mod:`orchestration.control_plane.autoscaling.pause`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipelines.control import AgentRecord, Assignment, ControlStore, JobEvent, RescaleRecord

__all__ = ["RescaleMeter", "measure_rescale"]

log = logging.getLogger(__name__)

LOOKBACK_S = 30.0
"""How far before the change was seen its first stop may lie: a leaving agent releases its
tasks before it records that it stopped."""
SETTLE_TIMEOUT_S = 600.0
"""A rescale not settled in this long is dropped, not recorded (something else is wrong)."""


def _stops(event: JobEvent) -> bool:
    """A hand-off asked for (Running, no agent) or an owner's release (Waiting, its agent);
    a new task's first Waiting has no owner and stops nothing."""
    if event.state == "Waiting":
        return event.agent_id is not None
    return event.state == "Running" and event.agent_id is None


def measure_rescale(
    events: Sequence[JobEvent],
    topic: str,
    *,
    from_agents: int,
    to_agents: int,
    state_bytes: Mapping[str, int],
) -> RescaleRecord | None:
    """The record of the moves in ``events`` (the job model's history over one rescale), or
    None if no task of ``topic`` moved. A task counts once, by its first stop and the first
    Running on another agent after it; a task split or merged from others counts from their
    stop to its first Running."""
    prefix = f"{topic}:"
    stopped: dict[str, float] = {}
    released_by: dict[str, str | None] = {}
    resumed: dict[str, float] = {}
    for event in events:
        task = event.task
        if task is None or not task.startswith(prefix) or task in resumed:
            continue
        parents = _rebucketed_from(event)
        if parents and any(p in stopped for p in parents):  # a split or merge: the new task
            stopped.setdefault(task, min(stopped[p] for p in parents if p in stopped))
            released_by.setdefault(task, None)  # pauses from its parent's stop
        elif _stops(event):
            stopped.setdefault(task, event.at)
            if event.state == "Waiting":
                released_by.setdefault(task, event.agent_id)
        elif (
            event.state == "Running"
            and event.agent_id is not None
            and task in stopped
            and event.agent_id != released_by.get(task)
        ):
            resumed[task] = event.at
    if not resumed:
        return None
    pauses = [resumed[t] - stopped[t] for t in resumed]
    started = min(stopped[t] for t in resumed)
    settled = max(resumed.values())
    return RescaleRecord(
        topic=topic,
        started_at=started,
        settled_at=settled,
        from_agents=from_agents,
        to_agents=to_agents,
        tasks_moved=len(resumed),
        state_bytes=sum(state_bytes.get(t, 0) for t in resumed),
        pause_s=settled - started,
        task_pause_s=sum(pauses),
        max_task_pause_s=max(pauses),
    )


def _rebucketed_from(event: JobEvent) -> list[str]:
    """The tasks a new task was split or merged from (its first Waiting says so)."""
    if event.state != "Waiting":
        return []
    if event.reason.startswith("split from "):
        return [event.reason.removeprefix("split from ")]
    if event.reason.startswith("merged from "):
        return event.reason.removeprefix("merged from ").split(" and ")
    return []


@dataclass
class _Rescale:
    since: float
    """Events from here on belong to it."""
    from_agents: int
    to_agents: int
    deadline: float


class RescaleMeter:
    """Watches the coordinator's passes; records each rescale once the job model settles."""

    def __init__(self, control: ControlStore, topic: str) -> None:
        self.control = control
        self.topic = topic
        self.running: frozenset[str] | None = None
        """The running agents at the last pass."""
        self.last_pass = 0.0
        self.last_quiet = 0.0
        """The last pass that found the fleet settled with nothing to change."""
        self.open: _Rescale | None = None

    def observe(
        self,
        now: float,
        agents: Sequence[AgentRecord],
        live: Mapping[str, AgentRecord],
        assignments: Sequence[Assignment],
        changes: int,
    ) -> RescaleRecord | None:
        """One coordinator pass: ``live`` are the agents it sees alive, ``changes`` how many
        changes it is about to apply. The record of a rescale that settled in it, if any."""
        running = frozenset(a.agent_id for a in live.values() if a.state == "running")
        previous, last_pass = self.running, self.last_pass
        self.running, self.last_pass = running, now
        if previous is None:  # a new coordinator: it did not see the fleet before
            return None
        if len(running) != len(previous):
            states = {a.agent_id: a.state for a in agents}
            departed = previous - running
            if any(states.get(a) not in ("stopped", "draining") for a in departed):
                log.info("fleet of %s lost an agent: a recovery, not a rescale", self.topic)
                self.open = None
            elif self.open is None:
                since = max(self.last_quiet, last_pass - LOOKBACK_S)
                self.open = _Rescale(since, len(previous), len(running), now + SETTLE_TIMEOUT_S)
            else:
                self.open.to_agents = len(running)
        settled = not changes and self._settled(assignments, live)
        if self.open is None:
            if settled:
                self.last_quiet = now
            return None
        if now > self.open.deadline:
            log.warning("rescale of %s did not settle in %.0fs", self.topic, SETTLE_TIMEOUT_S)
            self.open = None
            return None
        if not settled:
            return None
        rescale, self.open = self.open, None
        self.last_quiet = now
        sizes = {s.task: s.state_bytes for s in self.control.tasks() if s.topic == self.topic}
        record = measure_rescale(
            self.control.jobs.events_since(rescale.since),
            self.topic,
            from_agents=rescale.from_agents,
            to_agents=rescale.to_agents,
            state_bytes=sizes,
        )
        if record is not None:
            self.control.rescales.record(record)
            log.info(
                "rescale %d -> %d agents: %d tasks moved (%.1f MB of state), paused %.1fs "
                "(tasks stood still %.1fs in all, at most %.1fs each)",
                record.from_agents,
                record.to_agents,
                record.tasks_moved,
                record.state_mb,
                record.pause_s,
                record.task_pause_s,
                record.max_task_pause_s,
            )
        return record

    @staticmethod
    def _settled(assignments: Sequence[Assignment], live: Mapping[str, AgentRecord]) -> bool:
        return bool(assignments) and all(
            a.state == "Running"
            and a.handoff_to is None
            and a.agent_id in live
            and live[a.agent_id].state == "running"
            for a in assignments
        )
