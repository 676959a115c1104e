"""An agent reloads the views in force even when they change at the worst moment: between its
two readings of them, or while a start it asked for still waits in its worker's queue.

The agent runs in this process against the real broker and control store, its control tick
and its worker's command step driven one at a time, so each interleaving is taken on purpose
rather than hoped for (`tests/e2e/test_agents.py` runs agents as processes, where CI once met
the first one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestration.control_plane.fleet.agent import Agent
from orchestration.control_plane.runtime import Runtime
from pipelines.config import PROJECT_ROOT
from tests.fixtures.agent_runtime import agent_runtime

pytestmark = pytest.mark.broker

PARTITIONS = 2


@pytest.fixture
def runtime(broker, tmp_path) -> Iterator[Runtime]:
    runtime = agent_runtime(broker, tmp_path, "reload", PARTITIONS)
    yield runtime
    runtime.control.close()


def _agent(runtime: Runtime) -> Agent:
    agent = Agent(runtime, "a0", topic=runtime.settings.topic)
    agent.jobs.register_agent("a0", "host", os.getpid(), runtime.settings.topic)
    return agent


def _close(agent: Agent) -> None:
    agent.worker.reader.close()
    agent.worker.dead_letter_writer.close()


def _disable_first_view(runtime: Runtime) -> str:
    """Deploy the views file's first view as it is, then disable it: what Dagster does."""
    victim = runtime.views()[0]
    (definition,) = [
        v
        for v in yaml.safe_load(Path(runtime.settings.views_file).read_text())["views"]
        if v["name"] == victim.name
    ]
    runtime.control.deploy_view(victim.name, victim.fingerprint, definition)
    runtime.control.set_view_state(victim.name, "Disabled")
    return victim.name


def _due(agent: Agent) -> bool:
    agent.next_view_check = 0.0  # the periodic check is due now
    return agent.reload_views()


def test_views_and_their_version_come_from_one_reading(runtime, monkeypatch) -> None:
    """The change lands right after the agent's first reading of the control store: the views
    it runs and the version it compares against must both be from before it, so the next
    check sees the change and reloads."""
    read = runtime.control.deployed_views
    landed: list[str] = []

    def then_disabled():
        found = read()
        if not landed:
            landed.append(_disable_first_view(runtime))
        return found

    monkeypatch.setattr(runtime.control, "deployed_views", then_disabled)
    agent = _agent(runtime)
    try:
        assert landed and landed[0] in {v.name for v in agent.views}  # read before the change
        assert _due(agent)
        assert landed[0] not in {v.name for v in agent.views}
    finally:
        _close(agent)


def test_a_start_queued_before_the_views_changed_restarts_with_the_new_ones(runtime) -> None:
    agent = _agent(runtime)
    try:
        agent.tick()  # leader: plans every task onto this agent and asks the worker to start them
        assert len(agent.requested) == PARTITIONS and not agent.worker.running()
        victim = _disable_first_view(runtime)
        assert _due(agent)  # nothing runs yet: the queued starts carry the old views
        agent.worker._apply_commands()  # the worker thread's step: starts, then what they asked
        agent.sync()
        agent.worker._apply_commands()
        running = {str(t): {v.name for v in task.views} for t, task in agent.worker.tasks.items()}
        assert len(running) == PARTITIONS, running
        assert all(victim not in names and names for names in running.values()), running
        states = {a.task: a.state for a in agent.jobs.assignments_of("a0")}
        assert set(states.values()) == {"Running"}, states
    finally:
        _close(agent)


def test_a_task_handed_off_as_the_views_change_goes_to_its_new_owner(runtime) -> None:
    """Its hand-off stopped it first: the reload must not keep it here."""
    agent = _agent(runtime)
    try:
        agent.tick()
        agent.worker._apply_commands()
        assert len(agent.worker.running()) == PARTITIONS
        agent.jobs.register_agent("a1", "host", os.getpid(), runtime.settings.topic)
        agent.tick()  # balancing hands a task to a1: a0 stops it at a checkpoint
        (moving,) = agent.handing_off
        _disable_first_view(runtime)
        assert _due(agent)  # the reload stops every running task, the one moving too
        agent.worker._apply_commands()
        mine = {a.task for a in agent.jobs.assignments_of("a0")}
        assert moving not in mine, mine  # released to the coordinator, not restarted here
        agent.sync()
        agent.worker._apply_commands()
        assert moving not in {str(t) for t in agent.worker.running()}
    finally:
        _close(agent)


def _declare(runtime: Runtime, fields: list[dict]) -> None:
    """Give the views file a declaration of the runtime's topic of its own, with ``fields``."""
    path = Path(runtime.settings.views_file)
    document = yaml.safe_load(path.read_text())
    (shipped,) = yaml.safe_load((PROJECT_ROOT / "data" / "topics.yaml").read_text())["topics"]
    document["topics"] = [{**shipped, "topic": runtime.settings.topic, "fields": fields}]
    path.write_text(yaml.safe_dump(document))


def _shipped_fields() -> list[dict]:
    (shipped,) = yaml.safe_load((PROJECT_ROOT / "data" / "topics.yaml").read_text())["topics"]
    return shipped["fields"]


def test_a_declaration_change_the_views_cannot_follow_is_refused_and_the_old_views_run(
    runtime,
) -> None:
    agent = _agent(runtime)
    try:
        before = {v.name: v.fingerprint for v in agent.views}
        fields = _shipped_fields()
        retyped = [{**f, "type": "double"} if f["name"] == "bytes_tx" else f for f in fields]
        _declare(runtime, retyped)
        assert not _due(agent)
        assert {v.name: v.fingerprint for v in agent.views} == before
        assert agent.refused is not None
        assert "column 'bytes_tx' is long in the views this agent runs, declared double" in (
            agent.refused
        )

        _declare(runtime, [f for f in fields if f["name"] != "bytes_tx"])  # the views sum it
        assert not _due(agent)
        assert {v.name: v.fingerprint for v in agent.views} == before
        assert "bytes_tx" in agent.refused

        added = [*fields, {"name": "region", "type": "string", "nullable": True}]
        _declare(runtime, added)  # an added field is followed: every view redeploys once
        assert _due(agent) and agent.refused is None
        after = {v.name: v.fingerprint for v in agent.views}
        assert after.keys() == before.keys()
        assert all(after[name] != before[name] for name in before)
        assert all("region" in v.declaration.columns() for v in agent.views)
    finally:
        _close(agent)
