"""An agent's graceful stop waits for a realtime publisher pass under way: the process must not
finalize while a daemon thread is inside a table commit (an exit that hung for good in CI)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from orchestration.control_plane.fleet.agent import Agent
from orchestration.control_plane.runtime import Runtime
from tests.fixtures.agent_runtime import agent_runtime

pytestmark = pytest.mark.broker


class SlowPublisher:
    """A publisher whose pass lasts ``seconds``: longer than the stop used to wait for it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = threading.Event()
        self.finished = threading.Event()

    def due(self) -> bool:
        return True

    def publish_once(self) -> None:
        self.started.set()
        time.sleep(self.seconds)  # the pass's work; the test waits on `started`, not on time
        self.finished.set()


@pytest.fixture
def runtime(broker, tmp_path) -> Iterator[Runtime]:
    runtime = agent_runtime(broker, tmp_path, "stop", 1)
    yield runtime
    runtime.control.close()


def test_a_stop_waits_for_the_publish_pass_under_way(runtime) -> None:
    agent = Agent(runtime, "a0", topic=runtime.settings.topic)
    agent.jobs.register_agent("a0", "host", os.getpid(), runtime.settings.topic)
    publisher = SlowPublisher(seconds=3.0)
    agent.publisher.publisher = publisher  # type: ignore[assignment]
    agent.publisher.tick(leader=True)
    assert publisher.started.wait(10), "the pass never started"
    agent.worker.stop_event.set()  # a stop before the worker ran: run() goes straight to its end
    assert agent.run() == 0
    assert publisher.finished.is_set(), "the agent ended while its publisher was mid-pass"


class CountingPublisher:
    """A publisher that counts its passes; one is due at a time."""

    def __init__(self) -> None:
        self.passes = 0

    def due(self) -> bool:
        return self.passes == 0

    def publish_once(self) -> None:
        self.passes += 1


@pytest.mark.parametrize("leader", [True, False])
def test_a_leader_publishes_once_more_when_it_stops(runtime, leader) -> None:
    """So does an agent that did not lead, when no one else leads: the fleet's last agent."""
    agent = Agent(runtime, "a0", topic=runtime.settings.topic)
    agent.jobs.register_agent("a0", "host", os.getpid(), runtime.settings.topic)
    publisher = CountingPublisher()
    agent.publisher.publisher = publisher  # type: ignore[assignment]
    agent.publisher.tick(leader=leader)
    agent.publisher.join(10)
    assert publisher.passes == (1 if leader else 0)
    agent.worker.stop_event.set()
    assert agent.run() == 0
    assert publisher.passes == (2 if leader else 1), "a stop without a live leader publishes"


@pytest.mark.parametrize("leader_stops", [True, False])
def test_an_agent_that_did_not_lead_publishes_at_its_stop_only_without_a_live_leader(
    runtime, leader_stops
) -> None:
    """Another agent holds the coordinator lease. Stopping itself (it no longer renews the
    lease, then releases it after its own last pass), it leaves what this agent's final flush
    wrote to this agent's pass; renewing it (alive), it publishes that itself."""
    agent = Agent(runtime, "a0", topic=runtime.settings.topic)
    agent.jobs.register_agent("a0", "host", os.getpid(), runtime.settings.topic)
    assert agent.jobs.acquire_lease("coordinator", "a1", 30.0)
    publisher = CountingPublisher()
    agent.publisher.publisher = publisher  # type: ignore[assignment]
    done = threading.Event()

    def other_leader() -> None:
        if leader_stops:  # its last pass, then its release
            time.sleep(1.0)
            agent.jobs.release_lease("coordinator", "a1")
            return
        while not done.wait(0.2):  # its heartbeats
            agent.jobs.acquire_lease("coordinator", "a1", 30.0)

    leader = threading.Thread(target=other_leader, daemon=True)
    leader.start()
    agent.worker.stop_event.set()
    try:
        assert agent.run() == 0
    finally:
        done.set()
        leader.join(10)
    assert publisher.passes == (1 if leader_stops else 0)
    lease = agent.jobs.lease("coordinator")
    assert lease["holder"] == ("a0" if leader_stops else "a1")
    assert lease["expires_at"] == 0.0 if leader_stops else lease["expires_at"] > time.time()
