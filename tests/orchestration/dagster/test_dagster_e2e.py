"""Against a running webserver and daemon: a GraphQL backfill, and the asset graph in a browser.

Dagster is started through :mod:`orchestration.dagster_service` (free port, DAGSTER_HOME
under tmp_path) once for the module and stopped by process group in teardown, which must
leave no process behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from assets.constants import RECONCILIATION_REPORT_KEY, corrected_key, realtime_key
from assets.partitions import partition_key_for
from orchestration.dagster_service import DagsterHandle, start_dagster
from pipelines.config import SluiceSettings
from pipelines.segments import HOUR_MS
from pipelines.serving.query import query_view
from pipelines.storage import LocalObjectStore
from tests.fixtures.browser import chromium_page
from tests.fixtures.dagster_fixture import build_archive, example_views
from tests.fixtures.processes import wait_until

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


@pytest.fixture(scope="module")
def dagster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DagsterHandle, SluiceSettings, list[int]]]:
    state = tmp_path_factory.mktemp("dagster-e2e") / "state"
    settings = SluiceSettings(state_dir=state)
    run = build_archive(Path(settings.resolved_storage_root))
    handle = start_dagster(
        settings,
        extra_env={
            "SLUICE_ENV": "local",
            "SLUICE_SPARK_SHUFFLE_PARTITIONS": "2",
            "SLUICE_SPARK_DRIVER_MEMORY": "1g",
        },
        timeout_s=240,
    )
    try:
        yield handle, settings, run.event_hours()
    finally:
        handle.stop()
        assert not handle.pids, f"Dagster left processes behind: {handle.pids}"
        assert handle.process.poll() is not None


def test_dagster_home_is_prepared(dagster) -> None:
    handle, settings, _ = dagster
    assert handle.dagster_home == settings.resolved_state_dir / "dagster"
    assert "enabled: false" in (handle.dagster_home / "dagster.yaml").read_text()
    assert (handle.dagster_home / ".nux" / "nux.yaml").read_text().strip() == "seen: 1"
    assert handle.url.startswith("http://127.0.0.1:")
    assert len(handle.pids) >= 3  # dagster dev, webserver, daemon (and the code server)


def test_backfill_of_three_hours_is_one_run_and_served(dagster) -> None:
    handle, settings, hours = dagster
    assert len(hours) == 3
    view = next(v for v in example_views() if v.name == "traffic_by_org")
    partitions = [partition_key_for(h) for h in hours]
    backfill = _backfill(handle, corrected_key(view.name), partitions, "e2e: three hours")
    assert backfill["status"] in ("COMPLETED_SUCCESS", "COMPLETED"), backfill
    assert backfill["numPartitions"] == 3
    assert [r["status"] for r in backfill["runs"]] == ["SUCCESS"]  # single-run policy
    store = LocalObjectStore(settings.resolved_storage_root)
    served = query_view(store, view, hours[0], hours[-1] + HOUR_MS)
    assert served.num_rows > 0
    assert set(served.column("source").to_pylist()) == {"batch v1"}
    starts = {
        int(t.timestamp() * 1000) // HOUR_MS * HOUR_MS
        for t in served.column("window_start").to_pylist()
    }
    assert starts == set(hours)


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


def _backfill(handle: DagsterHandle, key, partitions: list[str], title: str) -> dict:
    params = {
        "partitionNames": partitions,
        "assetSelection": [{"path": key.path}],
        "fromFailure": False,
        "title": title,
    }
    launched = handle.graphql(LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]

    def finished():
        answer = handle.graphql(POLL, {"id": backfill_id})["partitionBackfillOrError"]
        assert answer["__typename"] == "PartitionBackfill", answer
        return answer if answer["status"] in TERMINAL else None

    return wait_until(finished, 420, f"backfill {backfill_id}", every_s=2.0)


def test_the_days_report_is_one_click_from_the_asset(dagster, artifacts_dir: Path) -> None:
    """After the correction above, the report of its day materializes from the UI's API and
    its Markdown summary and HTML path are the materialization's metadata."""
    handle, _, hours = dagster
    day = datetime.fromtimestamp(hours[0] / 1000, tz=UTC).strftime("%Y-%m-%d")
    backfill = _backfill(handle, RECONCILIATION_REPORT_KEY, [day], "e2e: report")
    assert backfill["status"] in ("COMPLETED_SUCCESS", "COMPLETED"), backfill
    answer = handle.graphql(MATERIALIZATION, {"path": RECONCILIATION_REPORT_KEY.path})
    (latest,) = answer["assetOrError"]["assetMaterializations"]
    assert latest["partition"] == day
    entries = {e["label"]: e for e in latest["metadataEntries"]}
    summary = next(e for e in entries.values() if e["__typename"] == "MarkdownMetadataEntry")
    assert f"Reconciliation report {day}" in summary["mdStr"]
    html = next(e for e in entries.values() if e["__typename"] == "PathMetadataEntry")
    page = Path(html["path"])
    assert page.exists() and "<img" in page.read_text()


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
    with chromium_page(1600, 2200, shot) as page:
        page.goto(f"{handle.url}/locations/sluice/asset-groups/views/lineage")
        for name in expected:
            title = page.locator(f'[data-tooltip="{name}"]').first
            expect(title).to_be_visible(timeout=60_000)
            shown = title.inner_text().strip()
            assert _shown_as(name, shown), f"node of {name} shows {shown!r}"
        expect(page.get_by_text("raw_archive", exact=True).first).to_be_visible()
    assert shot.stat().st_size > 10_000


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
