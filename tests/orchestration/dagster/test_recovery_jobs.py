"""Recovery jobs from the Dagster UI change the job model, and say what they changed."""

from __future__ import annotations

import pytest

from orchestration.jobs.recovery import (
    drain_stream_agent,
    recover_stream_task,
    recover_stream_view,
    resume_stream_agent,
)
from orchestration.resources.control import LocalControlStoreResource
from pipelines.control import ControlStore


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = ControlStore(url)
    jobs = store.jobs
    jobs.register_agent("a0", "host", 1, "events")
    jobs.ensure_tasks("events", [0, 1])
    for p in (0, 1):
        jobs.schedule(f"events:{p}", 0, "a0", "test")
        jobs.mark_running(f"events:{p}", "a0", 1, "restored")
    for _ in range(3):
        jobs.record_view_crash("events:1", "v1", "state unreadable")
    yield store
    store.close()


def _run(job, store, config: dict):
    resources = {"control_store": LocalControlStoreResource(sqlite_url=store.url)}
    op = next(iter(job.graph.node_dict))
    return job.execute_in_process(run_config={"ops": {op: {"config": config}}}, resources=resources)


def _metadata(result) -> dict:
    (event,) = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in event.event_specific_data.metadata.items()}


def test_recover_a_view_reenables_it_and_restarts_its_task(store) -> None:
    result = _run(recover_stream_view, store, {"view": "v1"})
    assert result.success
    assert _metadata(result)["changed"] == "events:1"
    assert store.jobs.disabled_views("events:1") == set()
    row = {a.task: a for a in store.jobs.assignments()}["events:1"]
    assert (row.state, row.agent_id, row.generation) == ("Waiting", None, 2)  # owner fenced
    untouched = {a.task: a for a in store.jobs.assignments()}["events:0"]
    assert (untouched.state, untouched.generation) == ("Running", 1)


def test_recover_a_task_and_reject_an_unknown_one(store) -> None:
    result = _run(recover_stream_task, store, {"task": "events:1"})
    assert "v1" in _metadata(result)["detail"]
    assert store.jobs.disabled_views("events:1") == set()
    with pytest.raises(ValueError, match="no task 'events:9'"):
        _run(recover_stream_task, store, {"task": "events:9"})


def test_drain_and_resume_an_agent(store) -> None:
    result = _run(drain_stream_agent, store, {"agent_id": "a0", "wait_s": 0})
    assert _metadata(result)["changed"] == "events:0, events:1"
    assert "still on it" in _metadata(result)["detail"]  # no coordinator runs in this test
    (agent,) = store.jobs.agents()
    assert agent.state == "draining"
    _run(resume_stream_agent, store, {"agent_id": "a0"})
    assert store.jobs.agents()[0].state == "running"
    with pytest.raises(ValueError, match="no agent 'zz'"):
        _run(drain_stream_agent, store, {"agent_id": "zz", "wait_s": 0})
