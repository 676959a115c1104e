"""Recovery operations on the job model: what an operator runs from the Dagster UI.

Each one is a change of the job model in the control store; the agents carry it out on their
next tick. Restarting a task gives it a new generation: its current owner is fenced and drops
it without writing, and the scheduler places it on a live agent, which resumes it from its
last checkpoint (what was processed since is read again: replays are idempotent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pipelines.control import JobModelStore

__all__ = ["RecoveryResult", "drain_agent", "recover_task", "recover_view", "resume_agent"]


@dataclass(frozen=True)
class RecoveryResult:
    """What an operation changed, for the run's metadata."""

    action: str
    target: str
    changed: list[str] = field(default_factory=list)
    detail: str = ""

    def metadata(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "target": self.target,
            "changed": ", ".join(self.changed) or "nothing",
            "detail": self.detail,
        }


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
