"""Recovery operations on the job model: what an operator runs from the Dagster UI.

Each one is a change of the job model in the control store; the agents carry it out on their
next tick. Restarting a task gives it a new generation: its current owner is fenced and drops
it without writing, and the scheduler places it on a live agent, which resumes it from its
last checkpoint (what was processed since is read again: replays are idempotent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.control import JobModelStore
from pipelines.exceptions import SluiceError

__all__ = [
    "RecoveryResult",
    "agents_of_instance",
    "drain_agent",
    "evacuate_instance",
    "recover_task",
    "recover_view",
    "resume_agent",
]


@dataclass(frozen=True)
class RecoveryResult:
    """What an operation changed, for the run's metadata."""

    action: str
    target: str
    changed: list[str] = field(default_factory=list)
    detail: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    """Per task moved: seconds from the start of the operation to running elsewhere."""

    def metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "action": self.action,
            "target": self.target,
            "changed": ", ".join(self.changed) or "nothing",
            "detail": self.detail,
        }
        if self.timings:
            metadata["seconds_to_running_elsewhere"] = self.timings
            metadata["slowest_s"] = max(self.timings.values())
        return metadata


def _known_task(jobs: JobModelStore, task: str) -> None:
    known = {a.task for a in jobs.assignments()}
    if task not in known:
        raise ValueError(f"no task {task!r} in the job model; known: {', '.join(sorted(known))}")


def recover_task(jobs: JobModelStore, task: str, reason: str) -> RecoveryResult:
    """Re-enable every view disabled on ``task`` and restart it from its checkpoint (also
    re-enables a Disabled task)."""
    _known_task(jobs, task)
    views = sorted(jobs.disabled_views(task))
    for view in views:
        jobs.enable_view(task, view, f"recovered: {reason}")
    jobs.set_task_state(task, "Waiting", f"restarted from its checkpoint: {reason}")
    detail = f"views re-enabled: {', '.join(views)}" if views else "no view was disabled"
    return RecoveryResult("recover task", task, [task], detail)


def recover_view(
    jobs: JobModelStore, view: str, reason: str, task: str | None = None
) -> RecoveryResult:
    """Re-enable ``view`` wherever it is disabled (or on ``task``) and restart those tasks
    from their checkpoints with it."""
    if task is not None:
        _known_task(jobs, task)
    tasks = sorted(
        {s.task for s in jobs.view_states(task) if s.view == view and s.state == "Disabled"}
    )
    for name in tasks:
        jobs.enable_view(name, view, f"recovered: {reason}")
        jobs.set_task_state(name, "Waiting", f"restarted with {view} re-enabled: {reason}")
    detail = "" if tasks else f"{view} is not disabled on any task"
    return RecoveryResult("recover view", view, tasks, detail)


def drain_agent(
    jobs: JobModelStore, agent_id: str, reason: str, wait_s: float = 0.0
) -> RecoveryResult:
    """Move every task off ``agent_id`` through checkpoint hand-offs and give it nothing new;
    with ``wait_s``, wait until it holds nothing (or the time is up)."""
    if not jobs.set_agent_state(agent_id, "draining", f"drain: {reason}"):
        known = ", ".join(a.agent_id for a in jobs.agents())
        raise ValueError(f"no agent {agent_id!r}; known: {known or 'none'}")
    held = sorted(a.task for a in jobs.assignments_of(agent_id))
    deadline = time.monotonic() + wait_s
    remaining = held
    while remaining and time.monotonic() < deadline:
        time.sleep(0.5)
        remaining = sorted(a.task for a in jobs.assignments_of(agent_id))
    detail = f"still on it: {', '.join(remaining)}" if remaining else "holds no task"
    return RecoveryResult("drain agent", agent_id, held, detail)


def resume_agent(jobs: JobModelStore, agent_id: str, reason: str) -> RecoveryResult:
    """Undo a drain: the agent may be given tasks again (balancing moves some back)."""
    if not jobs.set_agent_state(agent_id, "running", f"resumed: {reason}"):
        raise ValueError(f"no agent {agent_id!r}")
    return RecoveryResult("resume agent", agent_id, [agent_id])


def agents_of_instance(jobs: JobModelStore, instance_id: str) -> list[str]:
    """The agents on an instance: id = the instance id, or ``<instance id>-<n>`` for several."""
    return sorted(
        a.agent_id
        for a in jobs.agents()
        if a.agent_id == instance_id or a.agent_id.startswith(f"{instance_id}-")
    )


def _held(jobs: JobModelStore, agents: list[str]) -> dict[str, str]:
    return {
        a.task: a.agent_id
        for a in jobs.assignments()
        if a.agent_id in agents and a.state in ("Scheduled", "Running")
    }


def evacuate_instance(
    jobs: JobModelStore,
    instance_id: str,
    reason: str,
    *,
    replace: Callable[[], object] | None = None,
    replace_first: bool = False,
    already_going: bool = False,
    wait_s: float = 100.0,
) -> RecoveryResult:
    """Move every task off the agents of ``instance_id`` before AWS takes it.

    The agents are set draining (the coordinator hands all their tasks off at checkpoints at
    once) or, when the instance is ``already_going``, lost (their tasks are rescheduled from
    their last checkpoints at once). ``replace`` asks for a replacement machine first when
    ``replace_first`` (a rebalance recommendation) or when no other agent is left to take
    the tasks. Waits up to ``wait_s`` for the tasks to run elsewhere and says how long each
    took.
    """
    started = time.time()
    agents = agents_of_instance(jobs, instance_id)
    if not agents:
        return RecoveryResult("evacuate instance", instance_id, [], "no agent runs on it")
    held = _held(jobs, agents)
    others = [
        a.agent_id for a in jobs.agents() if a.agent_id not in agents and a.state == "running"
    ]
    notes = []
    if replace is not None and (replace_first or not others):
        try:
            replace()
            notes.append("a replacement ran first")
        except SluiceError as exc:  # the tasks must move anyway
            notes.append(f"replacement failed: {exc}")
    for agent_id in agents:
        jobs.set_agent_state(agent_id, "lost" if already_going else "draining", reason)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        now = {a.task: a for a in jobs.assignments()}
        if all(now[t].state == "Running" and now[t].agent_id not in agents for t in held):
            break
        time.sleep(0.2)
    timings: dict[str, float] = {}
    for event in jobs.events(limit=5000):
        if (
            event.task in held
            and event.state == "Running"
            and event.at >= started
            and event.agent_id is not None  # a hand-off request names no agent
            and event.agent_id not in agents
            and event.task not in timings
        ):
            timings[event.task] = round(event.at - started, 3)
    left = sorted(_held(jobs, agents))
    notes.append(f"still on it: {', '.join(left)}" if left else "nothing left on it")
    waiting = sorted(set(held) - set(timings) - set(left))
    if waiting:
        notes.append(f"not running yet: {', '.join(waiting)}")
    return RecoveryResult("evacuate instance", instance_id, sorted(held), "; ".join(notes), timings)
