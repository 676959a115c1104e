"""evacuate_instance's decisions over the job model: which agents an instance runs, when a
replacement comes first, and that a failing replacement does not stop the move."""

from __future__ import annotations

import pytest

from orchestration.control_plane.autoscaling.exceptions import RealizerError
from orchestration.control_plane.fleet.recovery import agents_of_instance, evacuate_instance
from pipelines.control import ControlStore


@pytest.fixture
def jobs(tmp_path):
    store = ControlStore(f"sqlite:///{tmp_path / 'control.db'}")
    jobs = store.jobs
    for agent in ("i-1", "i-1-2", "i-10", "i-2"):
        jobs.register_agent(agent, "host", 1, "events")
    jobs.ensure_tasks("events", [0, 1])
    jobs.schedule("events:0", 0, "i-1", "test")
    jobs.mark_running("events:0", "i-1", 1, "restored")
    yield jobs
    store.close()


def test_an_instances_agents_are_its_id_and_its_numbered_ones(jobs) -> None:
    assert agents_of_instance(jobs, "i-1") == ["i-1", "i-1-2"]
    assert agents_of_instance(jobs, "i-3") == []


def test_a_replacement_comes_first_only_when_needed(jobs) -> None:
    asked = []
    result = evacuate_instance(jobs, "i-1", "spot", replace=lambda: asked.append(1), wait_s=0)
    assert asked == []  # i-10 and i-2 can take the task
    assert result.changed == ["events:0"]
    assert {a.agent_id: a.state for a in jobs.agents()}["i-1"] == "draining"
    evacuate_instance(
        jobs, "i-2", "rebalance", replace=lambda: asked.append(2), replace_first=True, wait_s=0
    )
    assert asked == [2]


def test_with_no_other_agent_the_replacement_is_asked_and_its_failure_reported(jobs) -> None:
    for agent in ("i-10", "i-2"):
        jobs.set_agent_state(agent, "stopped", "gone")

    def fail() -> None:
        raise RealizerError("group at its maximum")

    result = evacuate_instance(jobs, "i-1", "spot", replace=fail, wait_s=0)
    assert "replacement failed: group at its maximum" in result.detail
    assert "still on it: events:0" in result.detail  # no coordinator runs in this test
    states = {a.agent_id: a.state for a in jobs.agents()}
    assert states["i-1"] == states["i-1-2"] == "draining"


def test_an_instance_already_going_loses_its_agents_at_once(jobs) -> None:
    evacuate_instance(jobs, "i-1", "shutting-down", already_going=True, wait_s=0)
    assert {a.agent_id: a.state for a in jobs.agents()}["i-1"] == "lost"
    assert evacuate_instance(jobs, "i-9", "spot", wait_s=0).detail == "no agent runs on it"
