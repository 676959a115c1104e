"""The autoscaler sensor and the simulator decide through one step: same metrics, same decisions.

A slice of a shipped trace runs through the simulator with ds2; every step's snapshot is then
turned into the task reports a fleet of that size would write, and the real
``autoscaler`` sensor evaluates one tick per step (``build_sensor_context``, a fake
control store, the simulator's clock). The steps where the sensor launches a scaling run and
the targets it asks for are the simulator's rescales, one for one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import dagster as dg
import pytest

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.policies import make_policy
from orchestration.control_plane.autoscaling.simulator import Simulator
from orchestration.jobs.correction import scale_stream_workers
from orchestration.resources.control import ControlStoreResource
from orchestration.sensors.autoscaler import make_autoscaling_sensor
from pipelines.control import TaskStatus
from pipelines.generator import load_trace

PARTITIONS = 8


@dataclass
class FakeControlStore:
    """What the sensor reads and keeps: task reports, the scaling record, the rate history."""

    statuses: list[TaskStatus] = field(default_factory=list)
    workers: int = 1
    minutes: dict[int, dict] = field(default_factory=dict)

    def tasks(self) -> list[TaskStatus]:
        return self.statuses

    def scaling(self, topic: str) -> dict:
        return {"desired_workers": self.workers, "applied_workers": self.workers, "applied_at": 0}

    def record_rate(self, topic: str, at_s: float, snapshot: dict, retain_s: float) -> None:
        self.minutes[int(at_s // 60)] = snapshot

    def rate_history(self, topic: str, since_s: float, until_s: float) -> list[dict]:
        return [s for m, s in sorted(self.minutes.items()) if since_s // 60 <= m < until_s // 60]

    @property
    def rescales(self) -> FakeControlStore:
        return self  # no rescale recorded: the sensor prices them as the simulator does

    def recent(self, topic: str, limit: int) -> list:
        return []

    def close(self) -> None:
        pass


FAKE = FakeControlStore()
STATE_MB_PER_TASK = AutoscaleSettings().fleet.state_mb_per_task
"""What the tasks report, so the sensor's pause is the simulator's."""


class FakeControlStoreResource(ControlStoreResource):
    def url(self) -> str:
        return "fake://"

    def open(self) -> FakeControlStore:  # type: ignore[override]
        return FAKE


def reports(metrics: FleetMetrics) -> list[TaskStatus]:
    """Task reports of a fleet in the state ``metrics`` describes: every partition owned by a
    worker, the processing rate carried by one task per worker, the backlog by partition 0."""
    workers = metrics.workers
    rate = metrics.processing_rate / workers
    statuses = []
    for p in range(PARTITIONS):
        backlog = round(metrics.backlog) if p == 0 else 0
        statuses.append(
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id=f"w{p % workers}",
                pid=1000 + p % workers,
                rate_in=rate if p < workers else 0.0,
                utilization=metrics.utilisation,
                next_offset=1_000_000,
                end_offset=1_000_000 + backlog,
                backlog=backlog,
                heartbeat_at=metrics.time,
                state_bytes=round(STATE_MB_PER_TASK * 1e6),
            )
        )
    return statuses


@pytest.fixture
def autoscale_settings(settings: AutoscaleSettings) -> AutoscaleSettings:
    tuned = settings.updated(
        fleet={"partitions": PARTITIONS, "worker_rate": 1000.0, "max_workers": PARTITIONS},
        simulation={"peak_rate": 6000.0, "step_s": 300.0, "days": 1.0},
        guards={"cooldown_s": 900.0},
    )
    return tuned.model_copy(update={"policy": "ds2", "sensor_cooldown_s": 900.0})


def test_the_sensor_decides_as_the_simulator_does(autoscale_settings: AutoscaleSettings) -> None:
    simulator = Simulator(load_trace("nyc_taxi"), autoscale_settings)
    seen: list[FleetMetrics] = []
    policy = make_policy("ds2", autoscale_settings)

    class Recording:
        name = policy.name

        def decide(self, metrics, history):
            seen.append(metrics)
            return policy.decide(metrics, history)

    result = simulator.run(Recording())
    simulated = [
        (step, record.workers) for step, record in enumerate(result.records) if record.rescaled
    ]
    assert len(simulated) >= 3, "the slice should make the simulator rescale several times"

    clock = {"now": 0.0}
    sensor = make_autoscaling_sensor(
        scale_stream_workers, settings=autoscale_settings, clock=lambda: clock["now"]
    )
    cursor = None
    requested = []
    instance = dg.DagsterInstance.ephemeral()  # one for every tick, as the daemon has
    for step, metrics in enumerate(seen):
        FAKE.statuses, FAKE.workers = reports(metrics), metrics.workers
        clock["now"] = metrics.time
        outcome = sensor.evaluate_tick(
            dg.build_sensor_context(
                cursor=cursor,
                instance=instance,
                resources={"control_store": FakeControlStoreResource()},
            )
        )
        cursor = outcome.cursor
        for run in outcome.run_requests or []:
            requested.append((step, run.run_config["ops"]["rescale_fleet"]["config"]["target"]))
    assert requested == simulated
    assert json.loads(cursor)["last_rescale_at"] == seen[simulated[-1][0]].time
