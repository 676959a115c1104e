"""Against a running webserver and daemon: a replayed day that corrects and reports itself,
a GraphQL backfill that re-corrects an hour, and the asset pages in a browser.

Dagster is started through :mod:`orchestration.control_plane.dagster_service` (free port,
DAGSTER_HOME under tmp_path) once for the module and stopped by process group in teardown, which
must leave no process behind.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from assets.constants import (
    RAW_ARCHIVE_KEY,
    RECONCILIATION_REPORT_KEY,
    corrected_key,
    realtime_key,
)
from assets.partitions import partition_key_for
from assets.views.checks import CORRECTION_CHECK
from orchestration.control_plane.dagster_service import DagsterHandle, start_dagster
from orchestration.control_plane.processes import LiveProcess, live_processes
from orchestration.control_plane.spark.server import SparkConnectServer
from pipelines.config import SluiceSettings
from pipelines.control import ControlStore
from pipelines.segments import HOUR_MS
from pipelines.serving.query import query_view
from pipelines.storage import LocalObjectStore
from pipelines.tables import TablesConfig, ViewTables
from pipelines.testing import StreamRun
from tests.fixtures.browser import chromium_page
from tests.fixtures.dagster_fixture import build_archive, example_views
from tests.fixtures.processes import wait_until
from tests.fixtures.spark_connect import TEST_SPARK_ENV, warm_spark_server
from tests.fixtures.webhook import Webhook, webhook_server
from tests.pipelines.batch.test_batch_correct import assert_rows_equal, oracle, served

pytestmark = pytest.mark.e2e

TERMINAL = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}

LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""
POLL = """
query Poll($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status numPartitions error { message } runs(limit: 10) { id status } }
    ... on PythonError { message }
  }
}
"""


STREAMED: dict[str, StreamRun] = {}
"""The module's replayed archive (its events are the oracle's input)."""


@pytest.fixture(scope="module")
def alert_hook() -> Iterator[Webhook]:
    """The webhook the module's Dagster posts its alerts to."""
    with webhook_server() as hook:
        yield hook


@pytest.fixture(scope="module")
def dagster(
    tmp_path_factory: pytest.TempPathFactory, alert_hook: Webhook
) -> Iterator[tuple[DagsterHandle, SluiceSettings, list[int]]]:
    state = tmp_path_factory.mktemp("dagster-e2e") / "state"
    settings = SluiceSettings(state_dir=state)
    run = build_archive(Path(settings.resolved_storage_root))
    STREAMED["run"] = run
    control = ControlStore(settings.resolved_control_store_url)
    control.report_tasks(run.task_statuses())  # the fleet finished the replay and caught up
    control.close()
    # The warm Spark every correction here runs on, as `sluice up` would start it; its JVM
    # starts while Dagster loads.
    with warm_spark_server(state):
        handle = start_dagster(
            settings,
            extra_env={
                "SLUICE_ENV": "local",
                **TEST_SPARK_ENV,
                "SLUICE_AUTOMATION_INTERVAL_S": "5",
                "SLUICE_IDLE_CLOSE_S": "5",
                "SLUICE_CORRECTION_RETRY_DELAY_S": "5",
                # the day's end, as `up` sets it to its replay's; the start comes from the archive
                "SLUICE_PARTITIONS_END": "2015-02-27-00:00",
                "SLUICE_ALERT_WEBHOOK_URL": alert_hook.url,
            },
            timeout_s=240,
        )
        try:
            yield handle, settings, run.event_hours()
        finally:
            handle.stop()
            assert not handle.pids, f"Dagster left processes behind: {handle.pids}"
            assert handle.process.poll() is not None


def _descendants(pid: int) -> dict[int, str]:
    """Every live process under ``pid`` with its command line."""
    processes = live_processes()
    children: dict[int, list[LiveProcess]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process)
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child.pid] = b" ".join(child.cmdline()).decode(errors="replace")
            todo.append(child.pid)
    return found


class ProcessTree:
    """Samples Dagster's process tree while a test waits: what ran under it."""

    def __init__(self, handle: DagsterHandle) -> None:
        self.handle = handle
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stop.wait(0.2):
            self.seen.update(_descendants(self.handle.process.pid).values())

    def __enter__(self) -> ProcessTree:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)

    def spark_submits(self) -> list[str]:
        return [c for c in self.seen if "spark-submit" in c or "deploy.SparkSubmit" in c]

    def correction_jobs(self) -> list[str]:
        return [c for c in self.seen if "correction_job.py" in c]


PARTITION_KEYS = """
query Keys($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode { partitionKeysByDimension { partitionKeys } }
  }
}
"""


def _partition_keys(handle: DagsterHandle, key) -> list[str]:
    answer = handle.graphql(PARTITION_KEYS, {"path": key.path})["assetNodeOrError"]
    (dimension,) = answer["partitionKeysByDimension"]
    return dimension["partitionKeys"]


def test_partitions_span_the_archived_day(dagster) -> None:
    """The UI offers the archive's day, not the years since the earliest trace: the hours
    start on the first archived hour's day (no SLUICE_PARTITIONS_START) and end where the
    settings say, as `up` sets them to its replay."""
    handle, _, hours = dagster
    day = datetime.fromtimestamp(hours[0] / 1000, tz=UTC)
    expected = [f"{day:%Y-%m-%d}-{h:02d}:00" for h in range(24)]
    for key in (
        RAW_ARCHIVE_KEY,
        *(corrected_key(v.name) for v in example_views() if not v.disabled),
    ):
        assert _partition_keys(handle, key) == expected, key
    assert _partition_keys(handle, RECONCILIATION_REPORT_KEY) == [f"{day:%Y-%m-%d}"]


def test_dagster_home_is_prepared(dagster) -> None:
    handle, settings, _ = dagster
    assert handle.dagster_home == settings.resolved_state_dir / "dagster"
    assert "enabled: false" in (handle.dagster_home / "dagster.yaml").read_text()
    assert (handle.dagster_home / ".nux" / "nux.yaml").read_text().strip() == "seen: 1"
    assert handle.url.startswith("http://127.0.0.1:")
    assert len(handle.pids) >= 3  # dagster dev, webserver, daemon (and the code server)


def _shown_as(name: str, text: str) -> bool:
    """The node title shows ``name`` whole, or middle-truncated with an ellipsis."""
    if "…" not in text:
        return text == name
    head, tail = text.split("…", 1)
    return len(head) >= 4 and name.startswith(head) and name.endswith(tail)


def test_asset_graph_shows_every_view_in_a_browser(dagster, artifacts_dir: Path) -> None:
    from playwright.sync_api import expect

    handle, _, _ = dagster
    expected = []
    for view in example_views():
        expected += [realtime_key(view.name).path[-1], corrected_key(view.name).path[-1]]
    shot = artifacts_dir / "dagster-asset-graph.png"
    with chromium_page(1600, 2800, shot) as page:  # six views: twelve nodes in a column
        page.goto(f"{handle.url}/locations/sluice/asset-groups/views/lineage")
        for name in expected:
            title = page.locator(f'[data-tooltip="{name}"]').first
            expect(title).to_be_visible(timeout=60_000)
            shown = title.inner_text().strip()
            assert _shown_as(name, shown), f"node of {name} shows {shown!r}"
        expect(page.get_by_text("raw_archive", exact=True).first).to_be_visible()
    assert shot.stat().st_size > 10_000


LAUNCH_RUN = """
mutation LaunchRun($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""

RUN_STATUS = """
query RunStatus($id: ID!) {
  runOrError(runId: $id) { __typename ... on Run { status } }
}
"""


def test_the_spot_sensor_and_an_evacuation_run_show_in_the_ui(dagster, artifacts_dir) -> None:
    """What an operator sees: the spot sensor on the sensors page, and an evacuation run with
    what it did in its metadata (here an instance with no agent on it)."""
    from playwright.sync_api import expect

    handle, _, _ = dagster
    config = {"instance_id": "i-0nobody", "kind": "interruption", "reason": "e2e", "wait_s": 5}
    params = {
        "selector": {
            "repositoryLocationName": "sluice",
            "repositoryName": "__repository__",
            "jobName": "evacuate_instance",
        },
        "runConfigData": {"ops": {"evacuate_instance_op": {"config": config}}},
        "executionMetadata": {"tags": [{"key": "sluice/instance", "value": "i-0nobody"}]},
    }
    launched = handle.graphql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    def finished():
        status = handle.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
        return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

    assert wait_until(finished, 180, f"run {run_id}", every_s=1.0) == "SUCCESS"
    shot = artifacts_dir / "dagster-spot-sensor.png"
    with chromium_page(1600, 1200, shot) as page:
        page.goto(f"{handle.url}/locations/sluice/sensors/spot_interruption_sensor")
        expect(page.get_by_text("spot_interruption_sensor").first).to_be_visible(timeout=60_000)
        page.goto(f"{handle.url}/runs/{run_id}")
        expect(page.get_by_text("no agent runs on it").first).to_be_visible(timeout=60_000)


SENSOR_TICKS = """
query Ticks($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { ticks(limit: 20) { timestamp status } } }
  }
}
"""


def test_a_failed_run_posts_exactly_one_alert(dagster, alert_hook: Webhook) -> None:
    """A forced failure (a rescale to 0 workers, which the realizer refuses) reaches the
    webhook once, with a link to the run; later ticks of the sensor post nothing more."""
    handle, _, _ = dagster
    params = {
        "selector": {
            "repositoryLocationName": "sluice",
            "repositoryName": "__repository__",
            "jobName": "scale_stream_workers",
        },
        "runConfigData": {"ops": {"rescale_fleet": {"config": {"target": 0}}}},
    }
    launched = handle.graphql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    def about_the_run() -> list[dict]:
        return [p for p in alert_hook.received() if run_id in p["text"]]

    (alert,) = wait_until(about_the_run, 180, "the run-failure alert", every_s=1.0)
    assert alert["sluice_kind"] == "run_failure"
    assert "run of scale_stream_workers failed" in alert["text"]
    assert f"{handle.url}/runs/{run_id}|open in Dagster>" in alert["text"]
    status = handle.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
    assert status == "FAILURE"
    posted_at = time.time()
    selector = {
        "repositoryLocationName": "sluice",
        "repositoryName": "__repository__",
        "sensorName": "alert_on_run_failure",
    }

    def ticks_since() -> int:
        answer = handle.graphql(SENSOR_TICKS, {"selector": selector})["sensorOrError"]
        ticks = answer["sensorState"]["ticks"]
        return sum(t["timestamp"] > posted_at for t in ticks) >= 2 or None

    wait_until(ticks_since, 120, "two more ticks of the run-failure sensor", every_s=1.0)
    assert len(about_the_run()) == 1, alert_hook.received()
    assert not [p for p in alert_hook.received() if p["sluice_kind"] == "check_failure"]


MATERIALIZATION = """
query Latest($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) {
    __typename
    ... on Asset {
      assetMaterializations(limit: 1) {
        partition
        metadataEntries {
          label
          __typename
          ... on MarkdownMetadataEntry { mdStr }
          ... on PathMetadataEntry { path }
        }
      }
    }
  }
}
"""


HOUR_METADATA = """
query Hour($path: [String!]!, $partition: String!) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset {
      assetMaterializations(partitions: [$partition], limit: 1) {
        runId
        metadataEntries {
          label
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
          ... on BoolMetadataEntry { boolValue }
          ... on TextMetadataEntry { text }
        }
      }
    }
  }
}
"""


def _hour_metadata(handle: DagsterHandle, key, hour: int) -> dict:
    variables = {"path": key.path, "partition": partition_key_for(hour)}
    answer = handle.graphql(HOUR_METADATA, variables)["assetOrError"]
    (event,) = answer["assetMaterializations"]
    values = {}
    for entry in event["metadataEntries"]:
        found = [
            entry.get(k) for k in ("intValue", "floatValue", "boolValue", "text") if k in entry
        ]
        values[entry["label"]] = found[0] if found else None
    return values


NODE = """
query Node($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    __typename
    ... on AssetNode {
      partitionStats { numMaterialized numFailed numMaterializing }
      freshnessStatusInfo { freshnessStatus }
      assetChecksOrError {
        ... on AssetChecks { checks { name executionForLatestMaterialization { status } } }
      }
    }
  }
}
"""
CHECK_HOURS = """
query CheckHours($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks {
          checks {
            name
            partitionStatuses {
              __typename
              ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } }
            }
          }
        }
      }
    }
  }
}
"""
RUNS = """
query Runs {
  runsOrError(limit: 50) {
    __typename
    ... on Runs { results { runId status jobName tags { key value } assetSelection { path } } }
  }
}
"""


def _node(handle: DagsterHandle, key) -> dict:
    answer = handle.graphql(NODE, {"path": key.path})["assetNodeOrError"]
    assert answer["__typename"] == "AssetNode", answer
    return answer


def test_a_replayed_day_corrects_and_reports_itself(dagster, artifacts_dir: Path) -> None:
    """Nothing is launched by hand: the fleet's report closes the replay's hours, automation
    corrects each of them for every view and then reports the day, and the corrected assets
    are fresh by their freshness policy."""
    from playwright.sync_api import expect

    handle, settings, hours = dagster
    day = datetime.fromtimestamp(hours[0] / 1000, tz=UTC).strftime("%Y-%m-%d")
    next_day = datetime.fromtimestamp(hours[0] / 1000 + 86400, tz=UTC).strftime("%Y-%m-%d")
    views = [v for v in example_views() if not v.disabled]

    def reported():
        latest = handle.graphql(MATERIALIZATION, {"path": RECONCILIATION_REPORT_KEY.path})
        found = latest["assetOrError"].get("assetMaterializations") or []
        return found[0] if found else None

    with ProcessTree(handle) as tree:
        latest = wait_until(reported, 420, "the day's report, by automation", every_s=2.0)
    # every correction ran on the warm Spark Connect server: the job was a plain Python
    # process under Dagster, and no spark-submit (a JVM of its own) ever ran there
    assert tree.correction_jobs(), tree.seen
    assert tree.spark_submits() == [], tree.spark_submits()
    assert latest["partition"] == day
    entries = {e["label"]: e for e in latest["metadataEntries"]}
    summary = next(e for e in entries.values() if e["__typename"] == "MarkdownMetadataEntry")
    assert f"Reconciliation report {day}" in summary["mdStr"]
    html = next(e for e in entries.values() if e["__typename"] == "PathMetadataEntry")
    assert "<img" in Path(html["path"]).read_text()

    for view in views:  # the replay's three hours and the day's 21 empty hours before them
        node = _node(handle, corrected_key(view.name))
        stats = node["partitionStats"]
        assert stats["numMaterialized"] == 24, (view.name, stats)
        assert stats["numFailed"] == 0, (view.name, stats)
        checks = {
            c["name"]: (c["executionForLatestMaterialization"] or {}).get("status")
            for c in node["assetChecksOrError"]["checks"]
        }
        assert checks[CORRECTION_CHECK] == "SUCCEEDED", (view.name, checks)
    # the reconciliation check's result per hour (logged from the range runs), as the UI reads it
    answer = handle.graphql(CHECK_HOURS, {"path": corrected_key(views[0].name).path})
    checks = answer["assetNodeOrError"]["assetChecksOrError"]["checks"]
    (check,) = [c for c in checks if c["name"] == CORRECTION_CHECK]
    ranges = check["partitionStatuses"]["ranges"]
    assert ranges and {r["status"] for r in ranges} == {"SUCCEEDED"}, ranges
    assert ranges[0]["startKey"] == f"{day}-00:00", ranges
    assert ranges[-1]["endKey"] in (f"{day}-23:00", f"{next_day}-00:00"), ranges
    store, tables = _store_and_tables(settings)
    served = query_view(store, views[0], hours[0], hours[-1] + HOUR_MS, tables=tables)
    assert set(served.column("source").to_pylist()) == {"batch v1"}
    # what the spark-submitted job reported through Pipes, per hour, agrees with the store
    hour = hours[1]
    reported = _hour_metadata(handle, corrected_key(views[0].name), hour)
    published = query_view(store, views[0], hour, hour + HOUR_MS, tables=tables).num_rows
    assert reported["version"] == 1 and reported["skipped"] is False, reported
    assert reported["dagster/row_count"] == reported["rows"] == published > 0, reported
    assert reported["events"] > 0 and reported["spark_seconds"] > 0, reported
    assert reported["spark_session"].startswith("Spark Connect sc://127.0.0.1:"), reported
    assert reported["dagster/table_name"] == f"sluice.{views[0].name}", reported
    assert reported["table_rows"] == published and reported["snapshot_id"], reported

    runs = [  # the asset runs; the spot test's evacuation run is its own job
        r for r in handle.graphql(RUNS)["runsOrError"]["results"] if r["jobName"] == "__ASSET_JOB"
    ]
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    for run in runs:  # every one came from the automation sensor, none from a person
        tags = {t["key"]: t["value"] for t in run["tags"]}
        assert tags.get("dagster/sensor_name") == "sluice_automation", tags
    # the replayed day closed as one stretch: one correction run for all its hours and views
    corrections = [
        r
        for r in runs
        if any(a["path"][-1].startswith("corrected_") for a in r["assetSelection"] or [])
    ]
    assert len(corrections) == 1, corrections

    key = corrected_key(views[0].name)
    wait_until(
        lambda: _node(handle, key)["freshnessStatusInfo"]["freshnessStatus"] == "HEALTHY",
        120,
        f"{key.path[-1]} to be fresh by its policy",
        every_s=2.0,
    )
    overview = artifacts_dir / "dagster-corrected-asset.png"
    shot = artifacts_dir / "dagster-corrected-asset-checks.png"
    with chromium_page(1600, 1400, shot) as page:
        page.goto(f"{handle.url}/assets/{key.path[-1]}")
        expect(page.get_by_text("Freshness policy").first).to_be_visible(timeout=60_000)
        # the freshness status comes by a query of its own, after the page (5 s was short on
        # a loaded machine: the failure's screenshot showed it a moment later)
        expect(page.get_by_text("Passing").first).to_be_visible(timeout=60_000)
        page.screenshot(path=str(overview), full_page=True)
        page.get_by_text("Checks", exact=True).first.click()
        expect(page.get_by_text(CORRECTION_CHECK).first).to_be_visible(timeout=60_000)
    assert overview.stat().st_size > 10_000 and shot.stat().st_size > 10_000


def _store_and_tables(settings) -> tuple[LocalObjectStore, ViewTables]:
    """The storage root and its views' tables as Dagster's processes open them."""
    store = LocalObjectStore(settings.resolved_storage_root)
    return store, ViewTables(TablesConfig.from_settings(settings, store.root))


def test_the_report_summary_shows_on_the_asset_page(dagster, artifacts_dir: Path) -> None:
    from playwright.sync_api import expect

    handle, _, _ = dagster
    shot = artifacts_dir / "dagster-reconciliation-report.png"
    with chromium_page(1600, 1400, shot) as page:
        page.goto(f"{handle.url}/assets/{RECONCILIATION_REPORT_KEY.path[-1]}")
        expect(page.get_by_text("summary", exact=True).first).to_be_visible(timeout=60_000)
        expect(page.get_by_text("open_html", exact=True).first).to_be_visible()
        show = page.get_by_text("[Show Markdown]")
        if show.count():  # long summaries sit behind one click, short ones inline
            show.first.click()
        expect(page.get_by_text("Causes (day totals)").first).to_be_visible()
    assert shot.stat().st_size > 10_000


RUN_LOGS = """
query Logs($id: ID!) {
  logsForRun(runId: $id) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message }
        ... on ExecutionStepFailureEvent { error { message causes { message } } }
        ... on ExecutionStepUpForRetryEvent { error { message causes { message } } }
      }
    }
  }
}
"""


def _run_messages(handle: DagsterHandle, run_id: str) -> list[str]:
    answer = handle.graphql(RUN_LOGS, {"id": run_id})["logsForRun"]
    messages = []
    for event in answer.get("events", []):
        messages.append(event.get("message") or "")
        error = event.get("error") or {}
        messages += [error.get("message") or ""]
        messages += [c.get("message") or "" for c in error.get("causes") or []]
    return messages


def test_a_backfill_recorrects_an_hour_even_with_the_warm_server_killed_under_it(dagster) -> None:
    """From the UI's API, a backfill of one already corrected hour is one run and publishes
    the hour's next batch version, which the serving layer prefers (that automation then
    reports the day again is in test_event_time_automation.py, without processes). The warm
    server is SIGKILLed while that correction runs on it: the step fails with a message that
    names the server, the keeper restarts it, the retry policy runs the step again on the new
    server, and the published hour equals the oracle computed from the archive."""
    handle, settings, hours = dagster
    view = next(v for v in example_views() if v.name == "traffic_by_org")
    hour = hours[-1]  # its corrections are versions 1 (automation) and 2 (this run)
    server = SparkConnectServer(settings.resolved_state_dir)
    before = server.wait_running(60)
    assert before.running, before.reason
    params = {
        "partitionNames": [partition_key_for(hour)],
        "assetSelection": [{"path": corrected_key(view.name).path}],
        "fromFailure": False,
        "title": "e2e: the server dies",
    }
    launched = handle.graphql(LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched

    def poll() -> dict:
        return handle.graphql(POLL, {"id": launched["backfillId"]})["partitionBackfillOrError"]

    run_id = wait_until(lambda: [r["id"] for r in poll()["runs"]], 120, "the backfill's run")[0]
    wait_until(
        lambda: any("Spark ready" in m for m in _run_messages(handle, run_id)),
        180,
        "the correction job connected to the server",
        every_s=0.1,
    )
    os.kill(before.pid, signal.SIGKILL)

    done = wait_until(lambda: (b := poll())["status"] in TERMINAL and b, 300, "the backfill")
    assert done["status"] in ("COMPLETED_SUCCESS", "COMPLETED"), done
    assert done["numPartitions"] == 1
    assert [r["status"] for r in done["runs"]] == ["SUCCESS"], done
    messages = _run_messages(handle, run_id)
    lost = [m for m in messages if f"Spark Connect server {before.url} (pid {before.pid})" in m]
    assert lost and "stopped during the correction" in lost[0], messages
    assert any("lost the Spark Connect server" in m for m in messages), messages
    after = server.health()
    assert after.running and after.pid != before.pid and after.restarts >= 1
    retried = [m for m in messages if m.startswith("correcting through the warm Spark Connect")]
    # a retry that starts before the keeper has the new server up fails the same way and is
    # retried again (seen at load 15+): the first attempt was on the killed server, the last on
    # its successor
    assert f"(pid {before.pid}," in retried[0], retried
    assert len(retried) >= 2 and f"(pid {after.pid}," in retried[-1], retried

    store, tables = _store_and_tables(settings)
    table = query_view(store, view, hour, hour + HOUR_MS, tables=tables)
    assert table.num_rows > 0 and set(table.column("source").to_pylist()) == {"batch v2"}
    others = query_view(store, view, hours[0], hours[0] + HOUR_MS, tables=tables)
    assert set(others.column("source").to_pylist()) == {"batch v1"}
    events = STREAMED["run"].events_frame(dedupe=True)
    events = events[(events["event_time"] >= hour) & (events["event_time"] < hour + HOUR_MS)]
    assert_rows_equal(served(table), oracle(view, events), view)
