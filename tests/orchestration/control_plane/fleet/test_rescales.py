"""What a rescale pauses: the coordinator's records from the job model, the moves the pause
model assumes, and the fit the autoscaler sensor prices rescales with."""

from __future__ import annotations

import numpy as np
import pytest

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.pause import (
    PauseModel,
    fit_pause,
    tasks_moved,
    with_measured_pause,
)
from orchestration.control_plane.fleet.coordinator import Coordinator
from orchestration.control_plane.fleet.rescales import RescaleMeter
from orchestration.control_plane.fleet.scheduling import plan_changes
from pipelines.control import AgentRecord, Assignment, ControlStore, RescaleRecord, TaskStatus

TOPIC = "events"
PARTITIONS = 6


# --- the moves the pause model assumes -------------------------------------------------------


def _balanced(partitions: int, agents: list[str]) -> dict[int, str]:
    """Owners after the coordinator has placed and balanced every task on ``agents``."""
    return _settle({}, partitions, agents)


def _settle(owners: dict[int, str], partitions: int, agents: list[str]) -> dict[int, str]:
    """Apply the coordinator's plan until it has nothing left to do; each change takes effect
    at once (a hand-off is released and scheduled on its target)."""
    owners = dict(owners)
    records = [AgentRecord(a, "h", 1, TOPIC, 0.0, 100.0, "running") for a in agents]
    for _ in range(10 * partitions):
        assignments = [
            Assignment(
                f"{TOPIC}:{p}",
                TOPIC,
                p,
                owners.get(p),
                1,
                "Running" if p in owners else "Waiting",
                0.0,
                "",
            )
            for p in range(partitions)
        ]
        changes = plan_changes(assignments, records, 100.0, 10.0)
        if not changes:
            return owners
        for change in changes:
            partition = int(change.task.rpartition(":")[2])
            if change.kind == "unassign":
                owners.pop(partition, None)
            else:
                owners[partition] = change.agent_id or ""
    raise AssertionError("the coordinator never settled")


@pytest.mark.parametrize(
    ("partitions", "old", "new"),
    [(6, 2, 3), (6, 3, 2), (6, 1, 3), (12, 4, 6), (24, 8, 5), (288, 24, 27), (288, 32, 24)],
)
def test_tasks_moved_is_what_the_coordinator_moves(partitions: int, old: int, new: int) -> None:
    before = _balanced(partitions, [f"a{i}" for i in range(old)])
    if new > old:
        after = _settle(before, partitions, [f"a{i}" for i in range(new)])
    else:  # the leaving agents release their tasks; the others take them
        kept = {p: a for p, a in before.items() if int(a[1:]) < new}
        after = _settle(kept, partitions, [f"a{i}" for i in range(new)])
    moved = sum(before[p] != after[p] for p in range(partitions))
    # exact up to how the coordinator rounds each agent's share
    assert abs(moved - int(tasks_moved(old, new, partitions))) <= abs(new - old)
    assert int(tasks_moved(old, old, partitions)) == 0


# --- the fit ----------------------------------------------------------------------------------


def _record(moved: int, state_mb: float, task_pause_s: float) -> RescaleRecord:
    return RescaleRecord(
        TOPIC, 0.0, 10.0, 2, 3, moved, int(state_mb * 1e6), 10.0, task_pause_s, task_pause_s
    )


def test_the_fit_recovers_the_per_task_and_per_mb_pause() -> None:
    rng = np.random.default_rng(3)
    records = []
    for _ in range(20):
        moved = int(rng.integers(1, 40))
        state = float(rng.uniform(0.0, 200.0))  # tasks carry unequal state
        records.append(_record(moved, state, (1.5 * moved + 0.2 * state) * rng.uniform(0.9, 1.1)))
    model = fit_pause(records, PauseModel(9.0, 9.0), min_records=3)
    assert model.rescales == 20
    assert model.per_task_s == pytest.approx(1.5, rel=0.15)
    assert model.per_state_mb_s == pytest.approx(0.2, rel=0.15)
    assert "fitted from 20 rescales" in model.describe()


def test_the_default_holds_until_enough_rescales_and_a_fit_is_never_negative() -> None:
    default = PauseModel(2.0, 0.1)
    few = [_record(3, 0.0, 6.0), _record(0, 0.0, 0.0), _record(2, 0.0, 4.0)]
    assert fit_pause(few, default, min_records=3) is default  # the empty move does not count
    # more state moved made the pause *shorter* here: the fit keeps the MB part at 0
    odd = [_record(4, 100.0, 4.0), _record(4, 0.0, 12.0), _record(8, 50.0, 16.0)]
    model = fit_pause(odd, default, min_records=3)
    assert model.per_state_mb_s == 0.0 and model.per_task_s > 0


def test_the_sensor_prices_rescales_with_the_fit_and_the_reported_state() -> None:
    settings = AutoscaleSettings().updated(fleet={"pause_fit_min_rescales": 2})
    records = [_record(4, 0.0, 20.0), _record(2, 0.0, 10.0)]
    tick, model = with_measured_pause(settings, records, [3_000_000, 5_000_000])
    assert model.per_task_s == pytest.approx(5.0)
    assert tick.fleet.move_pause_s == pytest.approx(5.0)
    assert tick.fleet.state_mb_per_task == pytest.approx(4.0)
    untouched, default = with_measured_pause(settings, records[:1], [])
    assert default.rescales == 0
    assert untouched.fleet.move_pause_s == settings.fleet.move_pause_s


# --- the coordinator's records ---------------------------------------------------------------


class FakeAgents:
    """Does to the job model what live agents do: release what they are asked to hand off,
    run what is scheduled on them, report their tasks' state size."""

    def __init__(self, control: ControlStore) -> None:
        self.control = control
        self.jobs = control.jobs

    def join(self, agent_id: str) -> None:
        self.jobs.register_agent(agent_id, "host", 1, TOPIC)

    def act(self) -> None:
        for a in self.jobs.assignments(TOPIC):
            if a.state == "Running" and a.handoff_to and a.agent_id:
                self.jobs.release(a.task, a.agent_id, a.generation, f"hand-off to {a.handoff_to}")
            elif a.state == "Scheduled" and a.agent_id:
                self.jobs.mark_running(a.task, a.agent_id, a.generation, "restored")
                partition = int(a.task.rpartition(":")[2])
                self.control.report_tasks(
                    [
                        TaskStatus(
                            a.task,
                            TOPIC,
                            partition,
                            a.agent_id,
                            1,
                            generation=a.generation,
                            state_bytes=1000 * (partition + 1),
                        )
                    ]
                )

    def leave(self, agent_id: str) -> None:
        """A graceful stop: release every task at a checkpoint, then say so."""
        for a in self.jobs.assignments_of(agent_id):
            self.jobs.release(a.task, agent_id, a.generation, f"agent {agent_id} stopped")
        self.jobs.set_agent_state(agent_id, "stopped", "stopped gracefully")


def _run(coordinator: Coordinator, agents: FakeAgents, passes: int = 30) -> None:
    for _ in range(passes):
        coordinator.reconcile()
        agents.act()


@pytest.fixture
def fleet(tmp_path):
    control = ControlStore(f"sqlite:///{tmp_path / 'control.db'}")
    meter = RescaleMeter(control, TOPIC)
    coordinator = Coordinator(control.jobs, TOPIC, lambda: list(range(PARTITIONS)), 10.0, meter)
    agents = FakeAgents(control)
    agents.join("a0")
    agents.join("a1")
    _run(coordinator, agents)
    yield control, coordinator, agents
    control.close()


def test_a_scale_up_is_recorded_with_the_tasks_it_moved(fleet) -> None:
    control, coordinator, agents = fleet
    before = {a.task: a.agent_id for a in control.jobs.assignments(TOPIC)}
    assert set(before.values()) == {"a0", "a1"}
    assert control.rescales.recent(TOPIC) == []  # the fleet's start is no rescale
    agents.join("a2")
    _run(coordinator, agents)
    (record,) = control.rescales.recent(TOPIC)
    after = {a.task: a.agent_id for a in control.jobs.assignments(TOPIC)}
    moved = [t for t in after if after[t] != before[t]]
    assert (record.from_agents, record.to_agents) == (2, 3)
    assert record.tasks_moved == len(moved) == 2
    sizes = {s.task: s.state_bytes for s in control.tasks()}
    assert record.state_bytes == sum(sizes[t] for t in moved)
    assert 0 <= record.max_task_pause_s <= record.task_pause_s <= 2 * record.pause_s + 1e-9
    assert record.settled_at - record.started_at == pytest.approx(record.pause_s)


def test_a_scale_down_is_recorded_and_a_lost_agent_is_not(fleet) -> None:
    control, coordinator, agents = fleet
    agents.join("a2")
    _run(coordinator, agents)
    held = [a.task for a in control.jobs.assignments_of("a2")]
    agents.leave("a2")
    _run(coordinator, agents)
    _up, down = control.rescales.recent(TOPIC)
    assert (down.from_agents, down.to_agents, down.tasks_moved) == (3, 2, len(held))
    # a1 dies without a word: its tasks move after its heartbeat ages, which is no rescale
    row = control.jobs.agents()[1]
    assert row.agent_id == "a1"
    with control.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE agents SET heartbeat_at = heartbeat_at - 60 WHERE agent_id = 'a1'"
        )
    _run(coordinator, agents)
    assert {a.agent_id for a in control.jobs.assignments(TOPIC)} == {"a0"}
    assert len(control.rescales.recent(TOPIC)) == 2
