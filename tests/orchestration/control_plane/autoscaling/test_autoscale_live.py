"""The autoscaler on live metrics: snapshots from task reports, the sensor's decision, the
Dagster run that carries it out through the control store."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import dagster as dg
import pytest

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.live import collect_fleet_metrics
from orchestration.control_plane.autoscaling.realizers import ControlStoreRealizer
from orchestration.control_plane.fleet import ScaleWatcher
from orchestration.control_plane.lag import task_lags
from orchestration.control_plane.runtime import Runtime
from orchestration.jobs.correction import scale_stream_workers
from orchestration.resources.control import LocalControlStoreResource
from orchestration.resources.fleet import LocalFleetResource
from orchestration.sensors.autoscaler import decide_scaling, make_autoscaling_sensor
from pipelines.config import KafkaSettings, SluiceSettings
from pipelines.control import ControlStore, TaskStatus


def _statuses(now: float, workers: int, backlog_per_task: int, rate_per_task: float, util: float):
    return [
        TaskStatus(
            task=f"events:{p}",
            topic="events",
            partition=p,
            worker_id=f"w{p % workers}",
            pid=1000 + p % workers,
            consumed=10_000,
            rate_in=rate_per_task,
            utilization=util,
            backlog=backlog_per_task,
            end_offset=10_000 + backlog_per_task,
            next_offset=10_000,
            heartbeat_at=now,
        )
        for p in range(4)
    ]


def test_snapshot_from_task_reports():
    now = 1000.0
    first = collect_fleet_metrics(
        task_lags(_statuses(now, 2, 100, 50.0, 0.5), now=now), partitions=4, now=now
    )
    assert first.workers == 2 and first.partitions == 4
    assert first.processing_rate == 200.0 and first.backlog == 400.0
    assert first.utilisation == 0.5
    assert first.true_processing_rate == 200.0  # 100 msg/s per worker at 50% busy
    later = collect_fleet_metrics(
        task_lags(_statuses(now + 10, 2, 150, 50.0, 0.5), now=now + 10),
        partitions=4,
        previous=first,
        now=now + 10,
    )
    assert later.backlog_growth == 20.0  # 200 more in 10 s
    assert later.input_rate == 220.0


def test_a_growing_backlog_at_full_utilisation_scales_up_and_a_quiet_fleet_does_not():
    settings = AutoscaleSettings()
    cursor: dict = {}
    now = 10_000.0
    request = None
    for step in range(6):  # backlog grows 2,000 msgs per 30 s at 100% busy
        statuses = _statuses(now + 30 * step, 1, 5_000 + 500 * step, 50.0, 1.0)
        request, cursor = decide_scaling(
            statuses, cursor, policy_name="ds2", settings=settings, now=now + 30 * step
        )
        if request:
            break
    assert request is not None and request["target"] > 1, cursor
    assert request["policy"] == "ds2" and request["reason"]
    quiet: dict = {}
    for step in range(4):
        statuses = _statuses(now + 30 * step, 2, 0, 10.0, 0.3)
        quiet_request, quiet = decide_scaling(
            statuses, quiet, policy_name="keda", settings=settings, now=now + 30 * step
        )
        assert quiet_request is None or quiet_request["target"] < 2


def test_ds2_holds_a_scale_down_across_sensor_ticks_for_its_interval():
    """Each tick builds the policy afresh; its scale-down interval must still hold."""
    settings = AutoscaleSettings(
        ds2={"scale_down_interval_s": 300.0},
        guards={"cooldown_s": 0.0, "hysteresis_workers": 0},
    )
    cursor: dict = {}
    t = 20_000.0

    def tick(backlog: int, rate: float, util: float):
        nonlocal cursor, t
        request, cursor = decide_scaling(
            _statuses(t, 3, backlog, rate, util),
            cursor,
            policy_name="ds2",
            settings=settings,
            now=t,
            cooldown_s=0.0,
        )
        t += 30.0
        return request

    for step in range(4):  # busy: three workers flat out, the backlog growing
        tick(5_000 + 500 * step, 50.0, 1.0)
    held = [tick(0, 5.0, 0.05) for _ in range(6)]  # quiet for 180 s < 300 s
    assert held == [None] * 6, held
    released = next((r for r in (tick(0, 5.0, 0.05) for _ in range(12)) if r), None)
    assert released is not None and released["target"] < 3


def test_sensor_launches_a_tagged_scaling_run(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'control.db'}"
    control = ControlStore(url)
    now = time.time()
    control.report_tasks(_statuses(now, 1, 50_000, 50.0, 1.0))
    monkeypatch.setenv("SLUICE_AUTOSCALE_POLICY", "keda")
    # a small fleet (50 msg/s per task): a lag threshold of 60 s at its rate, not the default's
    monkeypatch.setenv("SLUICE_AUTOSCALE_KEDA__LAG_THRESHOLD", "3000")
    sensor = make_autoscaling_sensor(scale_stream_workers)
    context = dg.build_sensor_context(
        cursor=None, resources={"control_store": LocalControlStoreResource(sqlite_url=url)}
    )
    result = sensor.evaluate_tick(context)
    assert len(result.run_requests) == 1
    run = result.run_requests[0]
    assert run.tags["sluice/policy"] == "keda"
    assert int(run.tags["sluice/to_workers"]) > 1
    config = run.run_config["ops"]["rescale_fleet"]["config"]
    assert config["target"] == int(run.tags["sluice/to_workers"])
    cursor = json.loads(result.cursor)
    assert len(cursor["history"]) == 1 and cursor["last_rescale_at"] is not None
    # the next tick is inside the cooldown: no second run
    control.report_tasks(_statuses(now + 1, 1, 60_000, 50.0, 1.0))
    again = sensor.evaluate_tick(
        dg.build_sensor_context(
            cursor=result.cursor,
            resources={"control_store": LocalControlStoreResource(sqlite_url=url)},
        )
    )
    assert not again.run_requests
    control.close()


class FakeFleet:
    """A LocalFleet's scaling surface without processes."""

    def __init__(self, agents):
        self.agents = {f"a{i}": None for i in range(agents)}

    def rescale(self, n):
        self.agents = {f"a{i}": None for i in range(n)}
        return sorted(self.agents)


@contextlib.contextmanager
def supervising(watcher: ScaleWatcher) -> Iterator[None]:
    """A supervisor thread carrying out scaling requests, as `sluice stream` does."""
    stop = threading.Event()

    def supervisor():
        while not stop.wait(0.1):
            watcher.check()

    thread = threading.Thread(target=supervisor, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def test_scaling_run_waits_until_the_supervisor_applied_it(tmp_path):
    settings = SluiceSettings(state_dir=tmp_path / "state")
    runtime = Runtime(settings, KafkaSettings())
    fleet = FakeFleet(2)
    with supervising(ScaleWatcher(runtime, fleet, "events", every_s=0)):
        outcome = scale_stream_workers.execute_in_process(
            run_config={
                "ops": {
                    "rescale_fleet": {"config": {"target": 3, "reason": "test", "policy": "manual"}}
                }
            },
            resources={
                "fleet": LocalFleetResource(
                    control_store_url=settings.resolved_control_store_url,
                    topic="events",
                    timeout_s=30,
                )
            },
        )
    assert outcome.success
    assert len(fleet.agents) == 3
    assert runtime.control.scaling("events")["applied_workers"] == 3
    realizer = ControlStoreRealizer(runtime.control, "events", timeout_s=1)
    assert realizer.current() == 3


def test_an_mcts_scaling_run_shows_its_plan_cost_split_and_rejected_alternative(
    tmp_path, monkeypatch
):
    """The default policy's run says what it weighed: the plan over the horizon, its cost in
    hardware, SLA and rescale parts, and the best plan that started with another move."""
    for key in ("SLUICE_AUTOSCALE_POLICY", "SLUICE_AUTOSCALE_SENSOR_COOLDOWN_S"):
        monkeypatch.delenv(key, raising=False)
    settings = SluiceSettings(state_dir=tmp_path / "state")
    runtime = Runtime(settings, KafkaSettings())
    url = settings.resolved_control_store_url
    clock = [time.time()]
    sensor = make_autoscaling_sensor(scale_stream_workers, clock=lambda: clock[0])
    assert AutoscaleSettings().policy == "mcts"  # the live default
    resources = {"control_store": LocalControlStoreResource(sqlite_url=url)}
    # one worker at its full 200 msg/s; 200k messages behind and growing: 1000 s of lag
    runtime.control.report_tasks(_statuses(clock[0], 1, 50_000, 50.0, 1.0))
    first = sensor.evaluate_tick(dg.build_sensor_context(cursor=None, resources=resources))
    assert not first.run_requests  # no input rate yet: one snapshot has no growth
    clock[0] += 30
    runtime.control.report_tasks(_statuses(clock[0], 1, 51_500, 50.0, 1.0))
    result = sensor.evaluate_tick(dg.build_sensor_context(cursor=first.cursor, resources=resources))
    (run,) = result.run_requests
    assert run.tags["sluice/policy"] == "mcts"
    assert "configured default" in run.tags["sluice/rescale_pause"]
    config = run.run_config["ops"]["rescale_fleet"]["config"]
    plan = json.loads(config["plan_json"])
    assert plan["segments"][0]["workers"] == config["target"] > 1
    assert sum(s["minutes"] for s in plan["segments"]) == 120  # the horizon, 2 h
    split = plan["split"]
    assert split["total"] == sum(split[p] for p in ("hardware", "sla", "rescale", "drain"))
    assert split["rescale"] > 0 and split["hardware"] > 0
    alternative = plan["alternative"]
    assert alternative["segments"][0]["workers"] != config["target"]
    assert alternative["cost"] >= plan["cost"] == config["predicted_cost"]

    fleet = FakeFleet(1)
    instance = dg.DagsterInstance.ephemeral()
    with supervising(ScaleWatcher(runtime, fleet, "events", every_s=0)):
        outcome = scale_stream_workers.execute_in_process(
            run_config=run.run_config,
            tags=run.tags,
            instance=instance,
            resources={
                "fleet": LocalFleetResource(control_store_url=url, topic="events", timeout_s=30)
            },
        )
    assert outcome.success and len(fleet.agents) == config["target"]
    (observation,) = outcome.asset_observations_for_node("rescale_fleet")
    metadata = observation.metadata
    table = metadata["plan"].value
    assert "**chosen**" in table and "**best rejected alternative**" in table
    assert f"| 0 | {plan['segments'][0]['minutes']:.0f} | {config['target']} |" in table
    for part in ("hardware", "sla", "rescale", "drain", "total"):
        assert metadata[f"cost_{part}"].value == pytest.approx(split[part])
    assert metadata["alternative_first_workers"].value == alternative["segments"][0]["workers"]
    logs = [entry.user_message for entry in instance.all_logs(outcome.run_id)]
    assert any(m.startswith("chosen plan: ") for m in logs)
    assert any("best rejected alternative: " in m for m in logs)
