"""Alerts reach a webhook (a local HTTP server standing in for Slack's) once per incident:
a failed ERROR check, a realtime view whose tasks stop; nothing is posted while the webhook
setting is unset; an unreachable webhook never fails the sensor."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from orchestration.control_plane.alerts import Alert, post_alert
from orchestration.control_plane.settings import get_dagster_settings
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from orchestration.sensors import make_alert_sensors, make_realtime_lag_sensor
from pipelines.control import ControlStore, TaskStatus
from pipelines.segments import record_change
from pipelines.storage import LocalObjectStore
from tests.fixtures.dagster_fixture import example_views
from tests.fixtures.webhook import webhook_server


@pytest.fixture
def hook(monkeypatch):
    with webhook_server() as server:
        monkeypatch.setenv("SLUICE_ALERT_WEBHOOK_URL", server.url)
        monkeypatch.setenv("SLUICE_DAGSTER_URL", "http://ui.example:3000")
        get_dagster_settings.cache_clear()
        yield server
    get_dagster_settings.cache_clear()


def test_an_alert_is_slack_json_with_a_link_and_off_when_unset(hook, monkeypatch) -> None:
    alert = Alert("run_failure", "run of x failed", "boom", "/runs/abc")
    assert post_alert(alert)
    (posted,) = hook.received()
    assert posted["text"].startswith("*Sluice: run of x failed*\nboom")
    assert "<http://ui.example:3000/runs/abc|open in Dagster>" in posted["text"]
    monkeypatch.delenv("SLUICE_ALERT_WEBHOOK_URL")
    get_dagster_settings.cache_clear()
    assert not post_alert(alert)
    assert not post_alert(alert, url="http://127.0.0.1:9/nowhere")  # logged, not raised
    assert len(hook.received()) == 1


def test_sluice_config_masks_the_webhook(hook) -> None:
    from orchestration.control_plane.settings import DagsterSettings
    from pipelines.settings import option_rows

    rows = {row.variable: row for row in option_rows(DagsterSettings())}
    row = rows["SLUICE_ALERT_WEBHOOK_URL"]
    assert hook.url not in row.value and "127.0.0.1" not in row.value


def test_a_failed_error_check_is_posted_once_per_incident(hook) -> None:
    verdict = {"passed": False}

    @dg.asset
    def hour() -> None:
        return None

    @dg.asset_check(asset=hour, blocking=True)
    def exact(_context) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=verdict["passed"], description="3 groups unexplained")

    defs = dg.Definitions(assets=[hour], asset_checks=[exact], sensors=make_alert_sensors())
    sensor = defs.get_sensor_def("alert_on_check_failure")
    instance = dg.DagsterInstance.ephemeral()
    cursor = None

    def run_and_tick() -> None:
        nonlocal cursor
        dg.materialize([hour, exact], instance=instance, raise_on_error=False)
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, repository_def=defs.get_repository_def()
        ) as ctx:
            sensor.evaluate_tick(ctx)
            cursor = ctx.cursor

    run_and_tick()
    run_and_tick()  # still failing: the same incident
    assert len(hook.received()) == 1
    text = hook.received()[0]["text"]
    assert "check exact of hour failed" in text and "3 groups unexplained" in text
    assert "http://ui.example:3000/assets/hour?view=checks" in text
    verdict["passed"] = True
    run_and_tick()
    verdict["passed"] = False
    run_and_tick()  # failing again after a pass: a new incident
    assert len(hook.received()) == 2


def test_the_failed_hour_of_a_partitioned_check_is_named_though_later_hours_passed(hook) -> None:
    hours = dg.HourlyPartitionsDefinition(
        start_date="2015-02-26-00:00", end_date="2015-02-27-00:00", timezone="UTC"
    )

    @dg.asset(partitions_def=hours)
    def hourly() -> dg.MaterializeResult:
        return dg.MaterializeResult()

    @dg.asset_check(asset=hourly, partitions_def=hours, blocking=True)
    def exact(context) -> dg.AssetCheckResult:
        hour = context.op_execution_context.partition_key
        return dg.AssetCheckResult(passed=hour != "2015-02-26-01:00", description="unexplained")

    defs = dg.Definitions(assets=[hourly], asset_checks=[exact], sensors=make_alert_sensors())
    instance = dg.DagsterInstance.ephemeral()
    for hour in ("2015-02-26-00:00", "2015-02-26-01:00", "2015-02-26-02:00"):
        dg.materialize([hourly, exact], instance=instance, partition_key=hour, raise_on_error=False)
    sensor = defs.get_sensor_def("alert_on_check_failure")
    with dg.build_sensor_context(
        instance=instance, repository_def=defs.get_repository_def()
    ) as ctx:
        sensor.evaluate_tick(ctx)
    (posted,) = hook.received()
    assert "check exact of hourly failed (hour 2015-02-26-01:00)" in posted["text"]


def test_a_range_run_of_hourly_checks_is_one_incident(hook) -> None:
    """The reconciliation check's way: one evaluation per hour logged, then the run's summary;
    a failed hour is posted once, naming it, and the failed summary adds nothing."""
    from assets.views.checks import summarize_hours

    hours = dg.HourlyPartitionsDefinition(
        start_date="2015-02-26-00:00", end_date="2015-02-27-00:00", timezone="UTC"
    )

    @dg.asset(partitions_def=hours)
    def hourly() -> dg.MaterializeResult:
        return dg.MaterializeResult()

    @dg.asset_check(asset=hourly, partitions_def=hours, blocking=True)
    def exact(context) -> dg.AssetCheckResult:
        results = []
        for hour in context.op_execution_context.partition_keys:
            result = dg.AssetCheckResult(passed=hour != "2015-02-26-01:00", description="off")
            context.op_execution_context.log_event(
                dg.AssetCheckEvaluation(
                    asset_key=hourly.key,
                    check_name="exact",
                    passed=result.passed,
                    description=result.description,
                    partition=hour,
                )
            )
            results.append((hour, result))
        return summarize_hours(results)

    defs = dg.Definitions(assets=[hourly], asset_checks=[exact], sensors=make_alert_sensors())
    instance = dg.DagsterInstance.ephemeral()
    span = {
        "dagster/asset_partition_range_start": "2015-02-26-00:00",
        "dagster/asset_partition_range_end": "2015-02-26-02:00",
    }
    dg.materialize([hourly, exact], instance=instance, tags=span, raise_on_error=False)
    sensor = defs.get_sensor_def("alert_on_check_failure")
    with dg.build_sensor_context(
        instance=instance, repository_def=defs.get_repository_def()
    ) as ctx:
        sensor.evaluate_tick(ctx)
    (posted,) = hook.received()
    assert "(hour 2015-02-26-01:00)" in posted["text"]


def test_a_view_whose_tasks_stop_is_posted_once(hook, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = ControlStore(url)

    def report(heartbeat_at: float) -> None:
        store.report_tasks(
            [
                TaskStatus(
                    task=f"events:{p}",
                    topic="events",
                    partition=p,
                    worker_id="w1",
                    pid=1,
                    next_offset=100,
                    end_offset=150,
                    last_processed_ts=heartbeat_at * 1000,
                    heartbeat_at=heartbeat_at,
                )
                for p in range(2)
            ]
        )

    views = [v for v in example_views() if v.name == "traffic_by_org"]
    sensor = make_realtime_lag_sensor(views, stale_after_s=30.0)
    control = LocalControlStoreResource(sqlite_url=url)
    cursor = None

    def tick() -> None:
        nonlocal cursor
        with dg.build_sensor_context(
            resources={"control_store": control, "storage": LocalStorageResource()}, cursor=cursor
        ) as ctx:
            cursor = sensor.evaluate_tick(ctx).cursor

    report(time.time() - 100)  # stopped reporting with a backlog: STOP
    tick()
    tick()
    assert len(hook.received()) == 1
    text = hook.received()[0]["text"]
    assert "realtime view traffic_by_org: 2 task(s) STOP" in text
    assert "http://ui.example:3000/assets/realtime_traffic_by_org" in text
    store.close()


def test_a_view_whose_table_lags_is_posted_once_and_its_lag_observed(hook, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    control_store = ControlStore(url)
    store = LocalObjectStore(tmp_path / "root")
    storage = LocalStorageResource(root=str(tmp_path / "root"))
    views = [v for v in example_views() if v.name == "traffic_by_org"]
    sensor = make_realtime_lag_sensor(views, stale_after_s=30.0, table_lag_alert_s=300.0)
    cursor = None

    def tick() -> dg.SensorResult:
        nonlocal cursor
        control_store.report_tasks(
            [
                TaskStatus(
                    task="events:0",
                    topic="events",
                    partition=0,
                    worker_id="w1",
                    pid=1,
                    next_offset=100,
                    end_offset=100,
                    last_processed_ts=time.time() * 1000,
                    heartbeat_at=time.time(),
                )
            ]
        )
        resources = {"control_store": LocalControlStoreResource(sqlite_url=url), "storage": storage}
        with dg.build_sensor_context(resources=resources, cursor=cursor) as ctx:
            result = sensor.evaluate_tick(ctx)
        cursor = result.cursor
        return result

    def observed_lag(result: dg.SensorResult) -> float:
        (observation,) = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
        return observation.metadata["table_lag_s"].value

    first = tick()
    assert observed_lag(first) == 0.0 and hook.received() == []  # nothing waits: no alert
    (started,) = [e for e in first.asset_events if isinstance(e, dg.AssetMaterialization)]
    assert started.metadata["table_lag_s"].value == 0.0  # the realtime asset carries it too
    old = int((time.time() - 900) * 1000)  # a flush 15 minutes ago, never published
    key = record_change(store, "traffic_by_org", [0], "events", 0, 1, at_ms=old)
    assert observed_lag(tick()) >= 900
    tick()
    assert len(hook.received()) == 1, "one alert per incident"
    posted = hook.received()[0]
    assert posted["sluice_kind"] == "table_lag" and "traffic_by_org" in posted["text"]
    store.delete(key)  # published: the incident ends
    assert observed_lag(tick()) == 0.0
    record_change(store, "traffic_by_org", [0], "events", 0, 1, at_ms=old)
    tick()
    assert len(hook.received()) == 2, "a new incident is posted again"
    control_store.close()
