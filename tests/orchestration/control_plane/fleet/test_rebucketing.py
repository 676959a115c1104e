"""The coordinator's key-bucket factor on a real job model (SQLite): splits go one factor step
at a time through the hand-off, the scheduler leaves tasks stopped for a split alone, and a
merge waits until fewer agents have called for it for the merge delay."""

from __future__ import annotations

from orchestration.control_plane.fleet.coordinator import Coordinator
from orchestration.control_plane.fleet.rebucketing import Rebucketer
from orchestration.control_plane.fleet.rescales import measure_rescale
from pipelines.config import PROJECT_ROOT
from pipelines.control import ControlStore
from pipelines.storage import LocalObjectStore
from pipelines.stream import TaskId
from pipelines.views import load_views

TOPIC = "events"
VIEWS = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if not v.is_session]


def _fleet(tmp_path, agents: int, max_factor: int = 4, merge_delay_s: float = 0.0):
    control = ControlStore(f"sqlite:///{tmp_path / 'control.db'}")
    for i in range(agents):
        control.jobs.register_agent(f"a{i}", "host", 1000 + i, TOPIC)
    store = LocalObjectStore(tmp_path / "storage")
    rebucketer = Rebucketer(control, store, TOPIC, lambda: VIEWS, max_factor, "org", merge_delay_s)
    coordinator = Coordinator(control.jobs, TOPIC, lambda: [0, 1, 2, 3], 60.0, None, rebucketer)
    return control, coordinator


def _agents_run_what_they_are_given(control: ControlStore) -> None:
    """What each agent does on its next sync: start what is Scheduled on it, stop at a
    checkpoint (and release) what is to be handed off."""
    for a in control.jobs.assignments(TOPIC):
        if a.state == "Scheduled":
            assert control.jobs.mark_running(a.task, a.agent_id, a.generation, "restored")
        elif a.state == "Running" and a.handoff_to:
            assert control.jobs.release(a.task, a.agent_id, a.generation, "stopped")


def _factors(control: ControlStore) -> list[int]:
    return sorted(TaskId.parse(a.task).factor for a in control.jobs.assignments(TOPIC))


def _settle(control: ControlStore, coordinator: Coordinator, passes: int = 12) -> None:
    for _ in range(passes):
        coordinator.reconcile()
        _agents_run_what_they_are_given(control)


def test_six_agents_split_four_partitions_into_sixteen_buckets_one_step_at_a_time(tmp_path):
    control, coordinator = _fleet(tmp_path, agents=6)
    coordinator.reconcile()  # four whole tasks scheduled
    _agents_run_what_they_are_given(control)
    assert _factors(control) == [1] * 4
    done = coordinator.reconcile()
    assert sum("stop for a split" in d for d in done) == 4
    marked = control.jobs.assignments(TOPIC)
    assert all(a.handoff_to == "@split" for a in marked)
    _agents_run_what_they_are_given(control)  # the owners stop them at a checkpoint
    waiting = control.jobs.assignments(TOPIC)
    assert all(a.state == "Waiting" and a.handoff_to == "@split" for a in waiting)
    done = coordinator.reconcile()
    assert sum(": split into" in d for d in done) == 4
    assert _factors(control) == [2] * 8  # one step: 8 buckets, not 16 at once
    _settle(control, coordinator)
    tasks = control.jobs.assignments(TOPIC)
    assert _factors(control) == [4] * 16
    assert all(a.state == "Running" for a in tasks)
    assert len({a.agent_id for a in tasks}) == 6  # every agent has work
    retired = [e for e in control.jobs.events(limit=500) if e.state == "Retired"]
    assert len(retired) == 12
    # the rescale meter counts each new bucket from its parent's stop to its first Running
    events = control.jobs.events(limit=1000)
    record = measure_rescale(events, TOPIC, from_agents=6, to_agents=6, state_bytes={})
    assert record is not None and record.tasks_moved == 8 + 16


def test_a_merge_waits_for_the_merge_delay(tmp_path):
    control, coordinator = _fleet(tmp_path, agents=6, merge_delay_s=3600.0)
    _settle(control, coordinator)
    assert _factors(control) == [4] * 16
    for i in range(2, 6):
        control.jobs.set_agent_state(f"a{i}", "stopped", "scaled in")
    _settle(control, coordinator, passes=4)
    assert _factors(control) == [4] * 16  # still within the delay: nothing merged
    coordinator.rebucketer.merge_delay_s = 0.0
    _settle(control, coordinator)
    tasks = control.jobs.assignments(TOPIC)
    assert _factors(control) == [1] * 4
    assert {a.agent_id for a in tasks} == {"a0", "a1"} and all(a.state == "Running" for a in tasks)


def test_without_a_factor_or_with_a_session_view_partitions_stay_whole(tmp_path):
    control, coordinator = _fleet(tmp_path, agents=6, max_factor=1)
    _settle(control, coordinator)
    assert _factors(control) == [1] * 4
    sessions = load_views(PROJECT_ROOT / "data" / "views.yaml")
    coordinator.rebucketer.max_factor = 4
    coordinator.rebucketer.views = lambda: sessions
    _settle(control, coordinator)
    assert _factors(control) == [1] * 4
