"""Guardian for real, against moto's Auto Scaling and ECS: a scale-out is done when the new
machines' agents registered; a scale-in drains the agents that go, through the coordinator's
checkpoint hand-offs, before their machines are let go.

The agents here are simulated at the control store's boundary (register, heartbeat, carry out
hand-offs), the way `sluice agent` does on a booted instance; the coordinator is the real one.
Real agent processes are tested in tests/e2e/test_agents.py.
"""

from __future__ import annotations

import threading
import time
import uuid

import boto3
import pytest

from orchestration.control_plane.autoscaling.config import EcsSettings
from orchestration.control_plane.autoscaling.exceptions import ScalingTimeout
from orchestration.control_plane.autoscaling.realizers import (
    AwsAutoScalingRealizer,
    EcsServiceRealizer,
)
from orchestration.control_plane.fleet.coordinator import Coordinator
from pipelines.control import ControlStore
from tests.fixtures.moto import auto_scaling_group, aws_test_credentials

PARTITIONS = 6


class SimulatedHosts:
    """Agents at the control-store boundary, plus the real coordinator, in one thread."""

    def __init__(self, store: ControlStore, boot_ids) -> None:
        self.store = store
        self.jobs = store.jobs
        self.boot_ids = boot_ids
        """Callable: ids of the machines that exist now (their agents boot on them)."""
        self.coordinator = Coordinator(
            self.jobs, "events", lambda: list(range(PARTITIONS)), loss_after_s=10
        )
        self.booted: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            for agent_id in self.boot_ids():
                if agent_id not in self.booted:
                    self.jobs.register_agent(agent_id, "sim", 1, "events")
                    self.booted[agent_id] = time.monotonic()
            for agent_id in self.booted:
                self.jobs.heartbeat(agent_id)
            self.coordinator.reconcile()
            for a in self.jobs.assignments():
                if a.state == "Scheduled":
                    self.jobs.mark_running(a.task, a.agent_id, a.generation, "restored")
                elif a.state == "Running" and a.handoff_to:
                    self.jobs.release(a.task, a.agent_id, a.generation, "hand-off at checkpoint")

    def __enter__(self) -> SimulatedHosts:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def store(tmp_path):
    store = ControlStore(f"sqlite:///{tmp_path / 'control.db'}")
    yield store
    store.close()


@pytest.fixture
def asg(moto_endpoint, monkeypatch):
    aws_test_credentials(monkeypatch)
    with auto_scaling_group(moto_endpoint, wait_timeout_s=20.0) as settings:
        yield settings


def _settled(jobs) -> bool:
    return all(a.state == "Running" and not a.handoff_to for a in jobs.assignments())


def test_asg_scale_out_waits_for_the_agents_and_scale_in_drains_first(asg, store) -> None:
    realizer = AwsAutoScalingRealizer(asg, jobs=store.jobs)
    with SimulatedHosts(store, realizer.in_service_ids) as hosts:
        assert realizer.apply(3, "load is up") == 3
        instances = realizer.in_service_ids()
        assert set(instances) <= set(hosts.booted)  # every new instance's agent registered
        deadline = time.monotonic() + 20
        while not (_settled(store.jobs) and len(hosts.jobs.assignments()) == PARTITIONS):
            assert time.monotonic() < deadline, "the job model never settled"
            time.sleep(0.05)
        owners = {a.task: a.agent_id for a in store.jobs.assignments()}
        assert set(owners.values()) == set(instances)  # balanced over the three agents

        assert realizer.apply(1, "load is down") == 1
        (survivor,) = realizer.in_service_ids()
        gone = set(instances) - {survivor}
        drained = {a.agent_id for a in store.jobs.agents() if a.state == "draining"}
        assert drained == gone  # exactly the drained instances were terminated
        held = {a.agent_id for a in store.jobs.assignments() if a.state != "Waiting"}
        assert held == {survivor}  # nothing was left on a machine that went
        handoffs = [e for e in store.jobs.events(limit=1000) if "hand-off" in e.reason]
        assert len(handoffs) >= 4


def test_asg_scale_out_times_out_when_no_agent_registers(asg, store) -> None:
    realizer = AwsAutoScalingRealizer(
        asg.model_copy(update={"wait_timeout_s": 1.0}), jobs=store.jobs
    )
    with pytest.raises(ScalingTimeout, match="have not registered"):
        realizer.apply(2, "no agent image on these instances")


def test_ecs_service_waits_for_agents_and_drains_before_stopping(moto_endpoint, monkeypatch, store):
    aws_test_credentials(monkeypatch)
    ecs = boto3.client("ecs", region_name="us-east-1", endpoint_url=moto_endpoint)
    cluster = f"sluice-{uuid.uuid4().hex[:6]}"
    ecs.create_cluster(clusterName=cluster)
    ecs.register_task_definition(
        family="sluice-agent",
        containerDefinitions=[
            {"name": "agent", "image": "sluice", "memory": 512, "command": ["sluice", "agent"]}
        ],
    )
    ecs.create_service(
        cluster=cluster, serviceName="agents", taskDefinition="sluice-agent", desiredCount=1
    )
    settings = EcsSettings(
        cluster=cluster,
        service="agents",
        endpoint_url=moto_endpoint,
        wait_timeout_s=20.0,
        poll_interval_s=0.05,
    )
    realizer = EcsServiceRealizer(settings, jobs=store.jobs)

    def tasks_of_service():  # what ECS would start for the desired count, by task id
        desired = realizer.current()
        return [f"task-{i}" for i in range(desired)]

    with SimulatedHosts(store, tasks_of_service) as hosts:
        assert realizer.apply(3, "load is up") == 3
        assert {"task-0", "task-1", "task-2"} <= set(hosts.booted)
        deadline = time.monotonic() + 20
        while not (_settled(store.jobs) and len(store.jobs.assignments()) == PARTITIONS):
            assert time.monotonic() < deadline, "the job model never settled"
            time.sleep(0.05)
        assert realizer.apply(2, "load is down") == 2
        assert realizer.current() == 2
        (drained,) = [a.agent_id for a in store.jobs.agents() if a.state == "draining"]
        assert not [a for a in store.jobs.assignments() if a.agent_id == drained]
    with pytest.raises(Exception, match="outside ECS service"):
        realizer.apply(100, "too many")
