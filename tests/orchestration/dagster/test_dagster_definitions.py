"""The code location loads, every job resolves, resources match per env, schedule and sensor."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.constants import (
    RAW_ARCHIVE_KEY,
    RECONCILIATION_REPORT_KEY,
    corrected_key,
    realtime_key,
)
from assets.partitions import DEFAULT_PARTITIONS_START, HOURLY, partition_key_for
from assets.views.checks import CORRECTION_CHECK
from orchestration import resources
from orchestration.definitions import correction_job, defs
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from orchestration.schedules import build_correction_schedule, grace_minutes, hour_to_correct
from orchestration.sensors import make_realtime_lag_sensor
from pipelines.config import PROJECT_ROOT, get_settings
from pipelines.control import ControlStore, TaskStatus
from pipelines.exceptions import ConfigError
from pipelines.segments import parse_hour_label
from tests.fixtures.dagster_fixture import build_archive, example_views

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


def test_workspace_yaml_points_at_the_definitions_module() -> None:
    workspace = yaml.safe_load((PROJECT_ROOT / "workspace.yaml").read_text())
    (entry,) = workspace["load_from"]
    assert entry["python_module"]["module_name"] == "orchestration.definitions"
    assert entry["python_module"]["location_name"] == "sluice"


def test_definitions_load_and_every_job_resolves() -> None:
    repo = defs.get_repository_def()
    jobs = repo.get_all_jobs()
    assert {job.name for job in jobs} >= {
        "correct_views",
        "evacuate_instance",
        "recover_stream_task",
        "recover_stream_view",
        "drain_stream_agent",
    }
    for job in jobs:
        assert defs.resolve_job_def(job.name).name == job.name
    assert repo.has_schedule_def("correct_views_hourly")
    assert repo.has_sensor_def("realtime_lag")
    assert repo.has_sensor_def("spot_interruption_sensor")


def test_every_view_has_a_realtime_and_a_corrected_asset_with_a_blocking_check() -> None:
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    keys = graph.get_all_asset_keys()
    assert any(v.is_session for v in example_views())
    for view in example_views():
        assert realtime_key(view.name) in keys
        corrected = graph.get(corrected_key(view.name))
        assert corrected.partitions_def == HOURLY
        assert corrected.backfill_policy == dg.BackfillPolicy.single_run()
        assert dg.AssetKey("raw_archive") in corrected.parent_keys
        checks = {
            c.name: c for c in graph.asset_check_keys if c.asset_key == corrected_key(view.name)
        }
        assert graph.get_check_spec(checks[CORRECTION_CHECK]).blocking
        if view.is_session:  # no expectation suite for sessions: the reconciliation checks them
            assert "expectations_pass" not in checks
        else:
            assert not graph.get_check_spec(checks["expectations_pass"]).blocking
    archive_checks = {c.name: c for c in graph.asset_check_keys if c.asset_key == RAW_ARCHIVE_KEY}
    assert graph.get_check_spec(archive_checks["nothing_lost"]).blocking
    assert graph.get_check_spec(archive_checks["archive_matches_schema"]).blocking
    report = graph.get(RECONCILIATION_REPORT_KEY)
    assert {corrected_key(v.name) for v in example_views()} <= set(report.parent_keys)
    groups = {graph.get(k).group_name for k in keys}
    assert groups == {"raw", "views", "reports"}


def test_partitions_start_at_the_shipped_trace_while_nothing_is_archived() -> None:
    from pipelines.generator import TRACES_DIR, load_trace

    assert DEFAULT_PARTITIONS_START == "2014-04-10-00:00"
    first = datetime.strptime(DEFAULT_PARTITIONS_START, "%Y-%m-%d-%H:%M").replace(tzinfo=UTC)
    for path in TRACES_DIR.glob("*.csv"):  # every shipped trace can be corrected from the UI
        assert load_trace(path).start_s >= first.timestamp(), path.name


def test_partitions_span_the_archive_or_the_settings(monkeypatch, tmp_path: Path) -> None:
    """Unset, the hours start on the day of the first archived hour and end now; the settings
    (what `up` sets to the replay's span) win; the report's days are the whole days."""
    from assets.partitions import daily_partitions, first_archived_hour, hourly_partitions
    from orchestration.control_plane.settings import get_dagster_settings
    from pipelines.storage import LocalObjectStore

    store = LocalObjectStore(tmp_path / "state" / "storage")
    assert first_archived_hour(store) is None
    for hour in ("2015-02-26T22", "2015-02-26T21", "2015-02-27T01"):
        store.put(f"archive/events/hour={hour}/events-0-0-10.parquet", b"x")
    assert first_archived_hour(store) == datetime(2015, 2, 26, 21, tzinfo=UTC)
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    for name in ("SLUICE_PARTITIONS_START", "SLUICE_PARTITIONS_END"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    get_dagster_settings.cache_clear()
    try:
        hourly = hourly_partitions()
        assert hourly.get_first_partition_key() == "2015-02-26-00:00"
        now = datetime.now(UTC)
        assert hourly.get_last_partition_key() == (now - timedelta(hours=1)).strftime(
            "%Y-%m-%d-%H:00"
        )
        monkeypatch.setenv("SLUICE_PARTITIONS_START", "2014-07-01-00:00")
        monkeypatch.setenv("SLUICE_PARTITIONS_END", "2014-07-02-03:00")
        get_dagster_settings.cache_clear()
        hourly = hourly_partitions()
        keys = hourly.get_partition_keys()
        assert (keys[0], keys[-1], len(keys)) == ("2014-07-01-00:00", "2014-07-02-02:00", 27)
        assert daily_partitions(hourly).get_partition_keys() == ["2014-07-01"]
    finally:
        get_settings.cache_clear()
        get_dagster_settings.cache_clear()


def test_resource_sets_have_identical_keys_and_env_selects_one(monkeypatch) -> None:
    assert set(resources.RESOURCE_SETS) == {"local", "prod"}
    assert (
        set(resources.RESOURCE_SETS["local"]())
        == set(resources.RESOURCE_SETS["prod"]())
        == {"kafka", "spark", "storage", "control_store", "fleet"}
    )
    monkeypatch.delenv("SLUICE_ENV", raising=False)
    assert resources.get_env() == "local"
    monkeypatch.setenv("SLUICE_ENV", "prod")
    assert resources.get_env() == "prod"
    monkeypatch.setenv("SLUICE_ENV", "staging")
    with pytest.raises(ConfigError, match="staging"):
        resources.get_env()


def test_the_local_resources_show_the_settings_runs_use(monkeypatch, tmp_path: Path) -> None:
    """The resources page shows real values, read once from SLUICE_* when the code location
    loads; a control store URL that may carry a password is never put there."""
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLUICE_SPARK_DRIVER_MEMORY", "3g")
    get_settings.cache_clear()
    try:
        local = resources.get_resources("local")
        assert local["storage"].root == str(tmp_path / "state" / "storage")
        assert local["control_store"].sqlite_url == f"sqlite:///{tmp_path / 'state' / 'control.db'}"
        assert local["spark"].driver_memory == "3g"
        assert local["spark"]._spark_settings().driver_memory == "3g"
        monkeypatch.setenv("SLUICE_CONTROL_STORE_URL", "postgresql+psycopg://u:secret@db/sluice")
        get_settings.cache_clear()
        local = resources.get_resources("local")
        assert local["control_store"].sqlite_url is None
        assert "secret" not in repr(local)
    finally:
        get_settings.cache_clear()


def test_the_prod_fleet_shows_the_group_it_scales(monkeypatch) -> None:
    monkeypatch.setenv("SLUICE_AUTOSCALE_AWS__GROUP_NAME", "agents-blue")
    monkeypatch.setenv("SLUICE_AUTOSCALE_AWS__REGION", "eu-west-1")
    fleet = resources.get_resources("prod")["fleet"]
    assert (fleet.group_name, fleet.region) == ("agents-blue", "eu-west-1")


def test_realtime_views_corrections_and_the_report_carry_freshness_policies() -> None:
    graph = defs.resolve_asset_graph()
    for view in example_views():
        policy = graph.get(corrected_key(view.name)).freshness_policy
        assert policy.fail_window.to_timedelta() == timedelta(minutes=120)
        assert policy.warn_window.to_timedelta() == timedelta(minutes=90)
    report = graph.get(RECONCILIATION_REPORT_KEY).freshness_policy
    assert report.fail_window.to_timedelta() == timedelta(hours=26)
    assert graph.get(RAW_ARCHIVE_KEY).freshness_policy is None
    realtime = graph.get(realtime_key("traffic_by_org")).freshness_policy
    assert realtime.fail_window.to_timedelta() == timedelta(minutes=10)
    assert graph.get(dg.AssetKey("events")).freshness_policy is None


def test_assets_annotate_the_abstract_resources() -> None:
    repo = defs.get_repository_def()
    corrected = repo.asset_graph.get(corrected_key("traffic_by_org")).assets_def
    assert corrected.required_resource_keys >= {"spark", "storage"}
    realtime = repo.asset_graph.get(realtime_key("traffic_by_org")).assets_def
    assert "control_store" in realtime.required_resource_keys


@pytest.mark.parametrize(
    ("scheduled", "grace", "hour"),
    [
        ("2015-02-26T23:15:00", 15, "2015-02-26T22"),
        ("2015-02-26T23:00:00", 0, "2015-02-26T22"),
        ("2015-02-27T00:30:00", 90, "2015-02-26T22"),
    ],
)
def test_the_schedule_corrects_the_hour_past_its_grace(
    scheduled: str, grace: int, hour: str
) -> None:
    moment = datetime.fromisoformat(scheduled).replace(tzinfo=UTC)
    assert hour_to_correct(moment, grace) == parse_hour_label(hour)


def test_grace_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("SLUICE_CORRECTION_GRACE_MINUTES", raising=False)
    assert grace_minutes() == 15
    monkeypatch.setenv("SLUICE_CORRECTION_GRACE_MINUTES", "40")
    assert grace_minutes() == 40
    assert build_correction_schedule(correction_job).cron_schedule == "40 * * * *"
    monkeypatch.setenv("SLUICE_CORRECTION_GRACE_MINUTES", "soon")
    with pytest.raises(ConfigError, match="soon"):
        grace_minutes()


def test_schedule_requests_archived_hours_and_skips_empty_ones(tmp_path: Path) -> None:
    run = build_archive(tmp_path / "storage")
    storage = LocalStorageResource(root=str(tmp_path / "storage"))
    schedule = build_correction_schedule(correction_job, grace=15)
    repo = defs.get_repository_def()
    archived = run.event_hours()[1]
    when = datetime.fromtimestamp(archived / 1000 + 3600 + 15 * 60, tz=UTC)
    with dg.build_schedule_context(
        scheduled_execution_time=when, resources={"storage": storage}, repository_def=repo
    ) as ctx:
        (request,) = schedule.evaluate_tick(ctx).run_requests
    assert request.partition_key == partition_key_for(archived)
    later = datetime(2016, 1, 1, 0, 15, tzinfo=UTC)
    with dg.build_schedule_context(
        scheduled_execution_time=later, resources={"storage": storage}, repository_def=repo
    ) as ctx:
        result = schedule.evaluate_tick(ctx)
    assert not result.run_requests
    assert "no archived events" in result.skip_message


def test_lag_sensor_records_observations_only_for_new_reports(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = ControlStore(url)
    now = time.time()
    store.report_tasks(
        [
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id="w1",
                pid=1,
                next_offset=100,
                end_offset=100 + 10 * p,
                watermark=1424987000000.0 + p,
                last_processed_ts=(now - 3) * 1000,
                heartbeat_at=now - (400 if p == 3 else 1),
                views={"counters": {"traffic_by_org": {"processed": 100, "dropped_late": 2}}},
            )
            for p in range(4)
        ]
    )
    store.close()
    views = example_views()
    sensor = make_realtime_lag_sensor(views)
    control = LocalControlStoreResource(sqlite_url=url)
    with dg.build_sensor_context(
        resources={"control_store": control, "storage": LocalStorageResource()}
    ) as ctx:
        result = sensor.evaluate_tick(ctx)
    observations = {
        e.asset_key: e for e in result.asset_events if isinstance(e, dg.AssetObservation)
    }
    assert set(observations) == {realtime_key(v.name) for v in views}
    # the fleet reports: its start is recorded as each view's materialization, what it runs
    made = {e.asset_key: e for e in result.asset_events if isinstance(e, dg.AssetMaterialization)}
    assert set(made) == {realtime_key(v.name) for v in views if not v.disabled}
    view = next(v for v in views if v.name == "traffic_by_org")
    deployed = made[realtime_key(view.name)]
    assert deployed.metadata["why"].value == "fleet started"
    assert deployed.metadata["fingerprint"].value == view.fingerprint
    assert deployed.metadata["source"].value.startswith("file ")
    assert "dagster/code_version" not in (deployed.tags or {})  # would flag it unsynced
    meta = observations[realtime_key("traffic_by_org")].metadata
    assert meta["backlog"].value == 60
    assert meta["tasks"].value == 4
    assert meta["tasks_stale"].value == 1
    assert meta["processed"].value == 400
    assert meta["dropped_late"].value == 8
    assert meta["event_time_watermark"].value.startswith("2015-02-26T21:43")
    assert meta["newest_event_time"].value.startswith("2015-02-26T21:43")
    assert 0 <= meta["time_lag_s"].value < 60
    assert 2 <= meta["last_processed_age_s"].value < 60
    assert meta["status"].value == "STOP"  # events:3 stopped reporting with a backlog
    assert meta["task_status"].value["events:0"] == "OK"
    cursor = json.loads(result.cursor)
    assert set(cursor) == {v.name for v in views} | {
        "_lag_tracker",
        "_alerted",
        "_deployed",
        "_marked",
        "_reporting",
        "_table_alerted",
    }
    assert set(cursor["_lag_tracker"]["samples"]) == {f"events:{p}" for p in range(4)}
    with dg.build_sensor_context(
        resources={"control_store": control, "storage": LocalStorageResource()},
        cursor=result.cursor,
    ) as ctx:
        again = sensor.evaluate_tick(ctx)
    assert not again.asset_events
    assert "no new task reports" in again.skip_message
    assert len(json.loads(again.cursor)["_lag_tracker"]["samples"]["events:0"]) == 2

    # with an SLA, each view's lag check is recorded on every tick, new reports or not
    checked = make_realtime_lag_sensor(views, lag_sla_s=600.0)
    for cursor in (None, result.cursor):
        with dg.build_sensor_context(
            resources={"control_store": control, "storage": LocalStorageResource()}, cursor=cursor
        ) as ctx:
            tick = checked.evaluate_tick(ctx)
        evaluations = {
            e.asset_key: e for e in tick.asset_events if isinstance(e, dg.AssetCheckEvaluation)
        }
        assert set(evaluations) == {realtime_key(v.name) for v in views}
        failed = evaluations[realtime_key("traffic_by_org")]
        assert not failed.passed and "events:3" in failed.description  # stopped reporting


def test_lag_sensor_alerts_on_a_task_waiting_longer_than_the_watchdog_allows(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy import update

    from pipelines.control.jobs import task_assignments

    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = ControlStore(url)
    jobs = store.jobs
    jobs.ensure_tasks("events", [0, 1])
    generation = jobs.schedule("events:0", 0, "a0", "least loaded")
    assert jobs.mark_running("events:0", "a0", generation, "restored")
    with store.engine.begin() as conn:  # events:1 has waited 120 s, e.g. for a lone @merge
        conn.execute(
            update(task_assignments)
            .where(task_assignments.c.task == "events:1")
            .values(since=time.time() - 120, handoff_to="@merge", reason="stopped for a merge")
        )
    store.close()
    views = example_views()
    sensor = make_realtime_lag_sensor(views, waiting_max_s=60.0)
    control = LocalControlStoreResource(sqlite_url=url)
    capfd.readouterr()
    with dg.build_sensor_context(
        resources={"control_store": control, "storage": LocalStorageResource()}
    ) as ctx:
        sensor.evaluate_tick(ctx)  # no task reported: it alerts all the same
    logged = capfd.readouterr().err.splitlines()  # the sensor's log, where its alerts go
    alerts = [line for line in logged if "Waiting longer than 60s" in line]
    assert len(alerts) == len([v for v in views if v.topic == "events"]) >= 1
    assert all("events:1 Waiting for @merge for 12" in a for a in alerts), alerts
    assert not any("events:0" in a for a in alerts)
    patient = make_realtime_lag_sensor(views, waiting_max_s=600.0)
    with dg.build_sensor_context(
        resources={"control_store": control, "storage": LocalStorageResource()}
    ) as ctx:
        patient.evaluate_tick(ctx)
    assert "Waiting longer" not in capfd.readouterr().err
