"""Mist's controller as a pure function: loss -> Waiting -> least-loaded live agent, never
disabled; balance and drain through checkpoint hand-offs, one calm step at a time."""

from __future__ import annotations

from collections import Counter

from orchestration.control_plane.fleet.scheduling import describe_assignments, plan_changes
from pipelines.control import AgentRecord, Assignment

NOW = 1_000.0
LOSS = 10.0


def _agent(agent_id: str, age_s: float = 0.0, state: str = "running") -> AgentRecord:
    return AgentRecord(agent_id, "host", 1, "events", 0.0, NOW - age_s, state)


def _task(
    partition: int,
    agent: str | None,
    state: str = "Running",
    generation: int = 1,
    handoff_to: str | None = None,
) -> Assignment:
    return Assignment(
        f"events:{partition}", "events", partition, agent, generation, state, 0.0, "", handoff_to
    )


def test_a_lost_agents_tasks_wait_then_go_to_the_least_loaded_live_agent() -> None:
    agents = [_agent("a0", age_s=11), _agent("a1"), _agent("a2")]
    tasks = [_task(0, "a0"), _task(1, "a0"), _task(2, "a1"), _task(3, "a1")]
    changes = plan_changes(tasks, agents, NOW, LOSS)
    unassigned = [(c.task, c.agent_id) for c in changes if c.kind == "unassign"]
    assert unassigned == [("events:0", "a0"), ("events:1", "a0")]
    assert "no heartbeat for 11.0s" in changes[0].reason
    scheduled = {c.task: c.agent_id for c in changes if c.kind == "schedule"}
    assert scheduled == {"events:0": "a2", "events:1": "a2"}
    assert all(c.generation == 1 for c in changes)  # conditional on what was read


def test_loss_never_disables_and_without_live_agents_tasks_wait() -> None:
    agents = [_agent("a0", state="lost"), _agent("a1", age_s=60)]
    tasks = [_task(0, "a0"), _task(1, "a1"), _task(2, None, "Waiting", 3)]
    changes = plan_changes(tasks, agents, NOW, LOSS)
    assert [c.kind for c in changes] == ["unassign", "unassign"]
    assert changes[0].reason == "agent a0 lost"
    assert all(c.kind != "disable" for c in changes)


def test_a_handoff_target_is_preferred_when_live() -> None:
    agents = [_agent("a0"), _agent("a1")]
    tasks = [_task(0, None, "Waiting", 2, handoff_to="a1"), _task(1, "a1"), _task(2, "a1")]
    (change,) = plan_changes(tasks, agents, NOW, LOSS)
    assert (change.kind, change.agent_id) == ("schedule", "a1")


def test_balance_hands_off_every_surplus_task_at_once() -> None:
    agents = [_agent("a0"), _agent("a1"), _agent("a2")]
    tasks = [_task(p, "a0") for p in range(4)] + [_task(4, "a1")]
    changes = plan_changes(tasks, agents, NOW, LOSS)
    # 5 tasks over 3 agents: 2, 2, 1; a0 hands its last two off, to the idlest first
    assert [(c.kind, c.task, c.agent_id) for c in changes] == [
        ("handoff", "events:2", "a2"),
        ("handoff", "events:3", "a1"),
    ]
    assert all("balance" in c.reason for c in changes)
    # a pending hand-off keeps the controller calm
    pending = [*tasks[:3], _task(3, "a0", handoff_to="a2"), tasks[4]]
    assert plan_changes(pending, agents, NOW, LOSS) == []
    # within one task of each other: nothing moves
    even = [_task(0, "a0"), _task(1, "a0"), _task(2, "a1"), _task(3, "a2")]
    assert plan_changes(even, agents, NOW, LOSS) == []
    # a scale-up from one agent to four over 12 tasks: the nine that must move, all at once,
    # three to each new agent; the old agent keeps its first three
    four = [_agent(f"a{i}") for i in range(4)]
    alone = [_task(p, "a0") for p in range(12)]
    changes = plan_changes(alone, four, NOW, LOSS)
    assert {c.kind for c in changes} == {"handoff"}
    assert sorted(c.task for c in changes) == sorted(f"events:{p}" for p in range(3, 12))
    assert Counter(c.agent_id for c in changes) == {"a1": 3, "a2": 3, "a3": 3}
    # uneven shares (10 over 3: 4, 3, 3): the busiest keeps the larger one, so 3 tasks move
    # (2 from a0, 1 from a1), not 4
    uneven = [_task(p, "a0") for p in range(6)] + [_task(p, "a1") for p in range(6, 10)]
    moves = plan_changes(uneven, agents, NOW, LOSS)
    assert Counter(int(c.task.rpartition(":")[2]) < 6 for c in moves) == {True: 2, False: 1}
    assert {c.agent_id for c in moves} == {"a2"}


def test_a_draining_agent_hands_everything_off_and_gets_nothing_new() -> None:
    agents = [_agent("a0", state="draining"), _agent("a1"), _agent("a2")]
    tasks = [_task(0, "a0"), _task(1, "a0"), _task(2, "a1")]
    changes = plan_changes(tasks, agents, NOW, LOSS)
    assert {(c.kind, c.task, c.agent_id) for c in changes} == {
        ("handoff", "events:0", "a2"),
        ("handoff", "events:1", "a1"),
    }
    waiting = [_task(3, None, "Waiting", 1), *tasks]
    (change,) = plan_changes(waiting, agents, NOW, LOSS)
    assert change.kind == "schedule" and change.agent_id == "a2"


def test_describe() -> None:
    tasks = [_task(0, "a0"), _task(1, "a1"), _task(2, None, "Waiting"), _task(3, "a0")]
    assert describe_assignments(tasks) == "Waiting: 2; a0: 0,3; a1: 1"
