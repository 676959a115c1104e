"""The coordinator's decisions, as a pure function of the job model and the agents.

Mist's controller: a task whose agent is lost (heartbeat older than the threshold, or seen
dead by a supervisor, or gone) goes back to Waiting; loss never disables. Waiting tasks are
scheduled on the least-loaded live agent (the one a hand-off named, if it is live). When
nothing waits and some loads differ by two or more, every hand-off that evens them out is
planned at once (they run in parallel), and every task of a draining agent is handed off;
while any hand-off is pending, nothing new is planned. A task stopped for a split or merge of
its key buckets waits for the coordinator to replace it, and nothing is balanced meanwhile. A hand-off is graceful: the owner stops
the task at a checkpoint and releases it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.control import AgentRecord, Assignment

__all__ = [
    "MERGE",
    "SPLIT",
    "Change",
    "describe_assignments",
    "is_rebucketing",
    "live_agents",
    "plan_changes",
    "waiting_too_long",
]


@dataclass(frozen=True)
class Change:
    """One step for the coordinator to apply, conditional on the task's generation."""

    kind: str
    """``unassign`` (owner lost), ``schedule`` (Waiting -> an agent) or ``handoff``."""
    task: str
    generation: int
    agent_id: str | None
    """unassign: the lost owner; schedule and handoff: the target."""
    reason: str


SPLIT = "@split"
MERGE = "@merge"
"""``handoff_to`` marks: stop the task at a checkpoint for a split or merge of its key buckets
(:mod:`orchestration.control_plane.fleet.rebucketing`), not for another agent."""


def is_rebucketing(a: Assignment) -> bool:
    return a.handoff_to in (SPLIT, MERGE)


def live_agents(
    agents: Sequence[AgentRecord], now: float, loss_after_s: float
) -> dict[str, AgentRecord]:
    """Agents that run (or drain) and whose heartbeat is recent enough."""
    return {
        a.agent_id: a
        for a in agents
        if a.state in ("running", "draining") and a.heartbeat_age_s(now) <= loss_after_s
    }


def _loss_reason(agent: AgentRecord | None, agent_id: str | None, now: float) -> str:
    if agent is None:
        return f"agent {agent_id} is unknown"
    if agent.state in ("stopped", "lost"):
        return f"agent {agent_id} {agent.state}"
    return f"agent {agent_id} lost: no heartbeat for {agent.heartbeat_age_s(now):.1f}s"


def waiting_too_long(
    assignments: Sequence[Assignment], now: float, waiting_max_s: float
) -> list[Assignment]:
    """Tasks Waiting longer than ``waiting_max_s`` (``SLUICE_TASK_WAITING_MAX_S``): what the
    coordinator's watchdog acts on, ``sluice status`` names and the realtime_lag sensor alerts
    on. Disabled tasks are an operator's choice and do not count."""
    return [a for a in assignments if a.state == "Waiting" and now - a.since > waiting_max_s]


def plan_changes(
    assignments: Sequence[Assignment],
    agents: Sequence[AgentRecord],
    now: float,
    loss_after_s: float,
) -> list[Change]:
    by_id = {a.agent_id: a for a in agents}
    live = live_agents(agents, now, loss_after_s)
    load = Counter({a: 0 for a, record in live.items() if record.state == "running"})
    changes: list[Change] = []
    waiting: list[tuple[Assignment, str | None, str]] = []
    rebucketing = False
    for a in assignments:
        if a.state in ("Scheduled", "Running"):
            if a.agent_id in live:
                if a.agent_id in load:
                    load[a.agent_id] += 1
                continue
            reason = _loss_reason(by_id.get(a.agent_id or ""), a.agent_id, now)
            changes.append(Change("unassign", a.task, a.generation, a.agent_id, reason))
            waiting.append((a, None, reason))
        elif a.state == "Waiting" and is_rebucketing(a):
            rebucketing = True  # stopped for a split or merge: the coordinator replaces it
        elif a.state == "Waiting":
            waiting.append((a, a.handoff_to, a.reason))
    for a, prefer, why in waiting:
        if not load:
            break  # no live agent: the task stays Waiting and says why
        target = prefer if prefer in load else min(load, key=lambda x: (load[x], x))
        load[target] += 1
        changes.append(Change("schedule", a.task, a.generation, target, f"{why}; on {target}"))
    if (
        waiting
        or rebucketing
        or not load
        or any(a.handoff_to for a in assignments if a.state == "Running")
    ):
        return changes
    draining = [
        a
        for a in assignments
        if a.state == "Running" and a.agent_id in live and live[a.agent_id].state == "draining"
    ]
    for a in draining:
        target = min(load, key=lambda x: (load[x], x))
        load[target] += 1
        changes.append(
            Change("handoff", a.task, a.generation, target, f"agent {a.agent_id} is draining")
        )
    if draining:
        return changes
    busiest = max(load, key=lambda x: (load[x], x))
    idlest = min(load, key=lambda x: (load[x], x))
    if load[busiest] - load[idlest] >= 2:
        changes.extend(_balance(assignments, load))
    return changes


def _balance(assignments: Sequence[Assignment], load: Counter[str]) -> list[Change]:
    """Every hand-off that evens the loads out (within one task), planned at once: the
    busiest agents keep the larger shares, so the fewest tasks move, and they all move in
    parallel (one at a time, a large scale-up would take minutes)."""
    agents = sorted(load, key=lambda x: (-load[x], x))
    share, extra = divmod(sum(load.values()), len(agents))
    target = {a: share + (i < extra) for i, a in enumerate(agents)}
    surplus = [
        a
        for agent in agents
        for a in [t for t in assignments if t.agent_id == agent and t.state == "Running"][
            target[agent] :
        ]
    ]
    room = [a for a in reversed(agents) for _ in range(target[a] - load[a])]
    changes = []
    for a, to in zip(surplus, room, strict=False):
        reason = f"balance: {a.agent_id} runs {load[a.agent_id or '']} tasks, {to} {load[to]}"
        changes.append(Change("handoff", a.task, a.generation, to, reason))
    return changes


def describe_assignments(assignments: Sequence[Assignment]) -> str:
    """``a0: 0,2; a1: 1#0/2,1#1/2; Waiting: 3`` — who runs which partitions (and buckets)."""
    owners: dict[str, list[str]] = {}
    for a in assignments:
        owner = a.agent_id if a.state in ("Scheduled", "Running") else a.state
        owners.setdefault(owner or "Waiting", []).append(a.task.rpartition(":")[2])
    return "; ".join(f"{owner}: {','.join(parts)}" for owner, parts in sorted(owners.items()))
