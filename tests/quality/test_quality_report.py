"""The reconciliation report of a day built from real data renders, in a browser too.

Traffic with late and duplicate events goes through real stream tasks (archive, realtime
segments, checkpoints); Spark corrects two of its hours; fleet samples are recorded through
the sampler. Then the report is built, stored, opened in headless Chromium, written by the
CLI (a subprocess) and materialized as the Dagster asset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import pytest

from assets.reports.reconciliation import build_reconciliation_report
from orchestration.cli import main as cli_main
from orchestration.control_plane.fleet.samples import FleetSampler
from orchestration.control_plane.lag import TaskLag
from orchestration.control_plane.runtime import Runtime
from orchestration.jobs.correction import build_report_job
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from orchestration.schedules import build_report_schedule, report_cron
from pipelines.batch import correct_hours
from pipelines.config import PROJECT_ROOT, KafkaSettings, SluiceSettings, get_settings
from pipelines.control import ControlStore, TaskStatus
from pipelines.exceptions import ConfigError
from pipelines.generator import GeneratorOptions
from pipelines.segments import HOUR_MS
from pipelines.tables import TablesConfig, ViewTables
from pipelines.testing import StreamRun, run_stream
from quality.report import InvalidReportDay, parse_day, publish_report, report_keys
from tests.fixtures.browser import chromium_page
from tests.fixtures.dagster_fixture import example_views
from tests.fixtures.spark import spark  # noqa: F401  (session-scoped SparkSession)

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

DAY = date(2015, 2, 26)
"""The shipped Twitter trace starts 2015-02-26 21:00: this traffic fills hours 21-23."""
OPTIONS = GeneratorOptions(
    max_events=4000,
    peak_rate=20000.0,
    late_share=0.05,
    late_delay_mean_s=400.0,  # many beyond the views' allowed lateness
    duplicate_share=0.03,
)


class Day:
    """A day of real data: storage root, control store, the two corrected hours."""

    def __init__(self, root: Path, run: StreamRun, corrected: list[int]) -> None:
        self.root = root
        self.run = run
        self.corrected = corrected
        self.control_url = f"sqlite:///{root / 'control.db'}"
        self.storage = root / "storage"
        # the views' tables, in the catalog the CLI and Dagster open (the control store's)
        self.tables = ViewTables(
            TablesConfig(warehouse=run.store.root, catalog_url=self.control_url)
        )

    def env(self) -> dict[str, str]:
        return {
            "SLUICE_STATE_DIR": str(self.root / "state"),
            "SLUICE_STORAGE_ROOT": str(self.storage),
            "SLUICE_CONTROL_STORE_URL": self.control_url,
            "SLUICE_VIEWS_FILE": str(PROJECT_ROOT / "data" / "views.yaml"),
        }


def _status(partition: int, worker: str, consumed: int, watermark: int) -> TaskStatus:
    return TaskStatus(
        f"events-{partition}",
        "events",
        partition,
        worker,
        10 + partition,
        consumed=consumed,
        watermark=watermark,
    )


def _record_samples(root: Path, control_url: str, hours: list[int]) -> None:
    """Samples as the supervisor records them while the fleet works through ``hours``."""
    settings = SluiceSettings(state_dir=root / "state", control_store_url=control_url)
    clock = iter(float(t) for t in range(1_000_000, 2_000_000, 10))
    sampler = FleetSampler(
        Runtime(settings, KafkaSettings()), interval_s=10.0, clock=clock.__next__
    )
    for step in range(36):  # every 5 min of event time over three hours
        watermark = hours[0] + step * 300_000
        workers = 2 if step < 18 else 3
        lags = [
            TaskLag(
                _status(p, f"w{p % workers}", step * 100, watermark),
                step * 10,
                1.0 + step % 7,
                1.0,
                False,
            )
            for p in range(4)
        ]
        assert sampler.maybe_record(lags)


@pytest.fixture(scope="module")
def day(tmp_path_factory, spark) -> Iterator[Day]:  # noqa: F811  (the session fixture above)
    root = tmp_path_factory.mktemp("report")
    run = run_stream(root / "storage", example_views(), options=OPTIONS)
    hours = [
        h
        for h in run.event_hours()
        if h < int(datetime(2015, 2, 27, tzinfo=UTC).timestamp() * 1000)
    ]
    assert len(hours) == 3
    corrected = hours[1:]
    built = Day(root, run, corrected)
    correct_hours(spark, run.store, run.views, corrected, tables=built.tables)
    _record_samples(root, built.control_url, hours)
    yield built
    built.tables.close()


@pytest.fixture(scope="module")
def published(day: Day):
    control = ControlStore(day.control_url)
    try:
        return publish_report(
            day.run.store, control, example_views(), DAY.isoformat(), tables=day.tables
        )
    finally:
        control.close()


def test_the_report_holds_both_series_the_causes_and_the_samples(day: Day, published):
    data, stored = published
    names = [v.name for v in example_views()]
    assert [v.name for v in data.views] == names
    assert len(data.reconciliations) == 24 * len(names)
    corrected = {(r.view, r.hour_ms) for r in data.corrected}
    assert corrected == {(n, h) for n in names for h in day.corrected}
    first = day.run.event_hours()[0]
    for view in example_views():
        series = data.series[view.name]
        assert series.has_realtime and series.has_corrected, view.name
        # a sliding view's windows starting in the hour before the first reach into it
        before = [first - HOUR_MS] if view.is_sliding else []
        assert data.uncorrected_hours(view.name) == [*before, first]
    totals = data.causes_total("traffic_by_org")
    assert totals.duplicates > 0 and totals.late_dropped > 0
    assert len(data.samples) == 36 and {s.workers for s in data.samples} == {2, 3}
    assert data.completeness is not None
    markdown = stored.markdown
    assert markdown.startswith(f"# Reconciliation report {DAY.isoformat()}")
    assert f"{len(data.corrected)} corrected" in markdown
    assert "no correction yet for hours 21:00-22:00" in markdown
    assert str(stored.html_path) in markdown
    sessions = data.sketch_error("sessions_by_org")  # HLL: within a few RSEs of exact
    assert sessions is not None and 0 <= sessions < 0.1
    assert data.sketch_error("traffic_by_org") is None  # exact aggregations only
    assert f"| {sessions:.2%} |" in markdown
    for key in report_keys(DAY).values():
        assert day.run.store.exists(key)
    document = json.loads(day.run.store.get(report_keys(DAY)["json"]))
    assert document["headline"]["corrected"] == len(data.corrected)


def test_the_html_shows_its_plots_and_tables_in_chromium(published, artifacts_dir: Path):
    data, stored = published
    shot = artifacts_dir / "reconciliation_report.png"
    with chromium_page(1200, 900, shot) as page:
        page.goto(stored.html_uri)
        page.wait_for_load_state("load")
        widths = page.eval_on_selector_all(
            "img.plot", "imgs => imgs.map(i => [i.id, i.complete ? i.naturalWidth : 0])"
        )
        rows = {
            view.name: page.locator(f"#hours-{view.name} tbody tr").count() for view in data.views
        }
        failed_rows = page.locator("table.hours tr.failed").count()
        headline = page.locator("#headline").inner_text()
    ids = {i for i, _ in widths}
    expected = {f"series-{v.name}" for v in data.views} | {"errors", "fleet", "causes"}
    assert ids == expected
    assert all(width > 0 for _, width in widths), widths
    assert rows == {v.name: 24 for v in data.views}
    assert failed_rows == len(data.failed)
    assert f"{len(data.corrected)} corrected" in headline
    assert shot.stat().st_size > 20_000


def test_an_empty_day_renders_with_notes(day: Day, tmp_path: Path):
    data, stored = publish_report(
        day.run.store, None, example_views(), "2015-03-10", tables=day.tables
    )
    assert not data.corrected and not data.samples
    assert "No archived events or realtime segments for 2015-03-10" in stored.markdown
    assert "No fleet samples for this day" in stored.markdown
    html = stored.html_path.read_text()
    assert "<img" not in html and "No fleet samples for this day" in html


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2014-13-01", "not a UTC date written YYYY-MM-DD"),
        ("20140701", "not written YYYY-MM-DD"),
        ("yesterday", "'yesterday' is not a UTC date"),
        ("1970-01-01", "outside 2000-01-01"),
    ],
)
def test_bad_days_are_refused_with_the_value(text: str, message: str):
    with pytest.raises(InvalidReportDay, match=message):
        parse_day(text)


def _sluice(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=PROJECT_ROOT,
    )


def test_the_cli_writes_the_report(day: Day, tmp_path: Path):
    out = tmp_path / "out"
    done = _sluice(["report", "--date", DAY.isoformat(), "--out", str(out)], day.env())
    assert done.returncode == 0, done.stderr
    assert f"{2 * len(example_views())} corrected" in done.stdout
    stored = day.storage / "reports" / DAY.isoformat()
    assert f"html: {stored / 'reconciliation.html'}" in done.stdout
    for name in ("reconciliation.html", "reconciliation.md", "reconciliation.json"):
        assert (out / name).stat().st_size > 0
        assert (stored / name).exists()
    scripted = _sluice(["report", "--date", DAY.isoformat(), "--json"], day.env())
    assert scripted.returncode == 0, scripted.stderr
    summary = json.loads(scripted.stdout)  # nothing but the JSON object on stdout
    assert summary["day"] == DAY.isoformat()
    assert summary["headline"]["corrected"] == 2 * len(example_views())
    assert summary["files"]["html"] == str(stored / "reconciliation.html")
    assert summary["copied"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--date", "2015-02-30"], "'2015-02-30' is not a UTC date written YYYY-MM-DD"),
        (["--date", "2015-02-26", "--views", "/nonexistent.yaml"], "/nonexistent.yaml"),
    ],
)
def test_the_cli_refuses_bad_input_with_exit_2(day: Day, monkeypatch, capsys, args, message):
    for name, value in day.env().items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        assert cli_main(["report", *args]) == 2
    finally:
        get_settings.cache_clear()
    assert message in capsys.readouterr().err


def test_the_asset_materializes_with_the_summary_and_the_page(day: Day, monkeypatch):
    for name, value in day.env().items():  # the settings name the day's catalog
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    asset = build_reconciliation_report(example_views())
    result = dg.materialize(
        [asset],
        partition_key=DAY.isoformat(),
        resources={
            "storage": LocalStorageResource(root=str(day.storage)),
            "control_store": LocalControlStoreResource(sqlite_url=day.control_url),
        },
    )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert metadata["summary"].value.startswith(f"# Reconciliation report {DAY.isoformat()}")
    html = Path(metadata["html"].value)
    assert html == day.storage / "reports" / DAY.isoformat() / "reconciliation.html"
    assert html.exists()
    assert metadata["open_html"].value == html.as_uri()
    assert metadata["corrected"].value == 2 * len(example_views())
    assert metadata["fleet_samples"].value == 36


def test_the_daily_schedule_requests_the_previous_day_only_when_it_has_data(day: Day):
    schedule = build_report_schedule(build_report_job())
    resources = {"storage": LocalStorageResource(root=str(day.storage))}

    def evaluate(moment: datetime):
        context = dg.build_schedule_context(scheduled_execution_time=moment, resources=resources)
        return schedule(context)  # the schedule's body, as the daemon runs it

    requested = evaluate(datetime(2015, 2, 27, 0, 30, tzinfo=UTC))
    assert isinstance(requested, dg.RunRequest)
    assert requested.partition_key == DAY.isoformat()
    assert requested.run_key == f"report-{DAY.isoformat()}"
    skipped = evaluate(datetime(2015, 3, 11, 0, 30, tzinfo=UTC))
    assert isinstance(skipped, dg.SkipReason)
    assert "no archived events of 2015-03-10" in skipped.skip_message
    assert schedule.cron_schedule == "30 0 * * *"


def test_a_bad_report_cron_is_refused(monkeypatch):
    monkeypatch.setenv("SLUICE_REPORT_CRON", "every day")
    with pytest.raises(ConfigError, match="SLUICE_REPORT_CRON='every day'"):
        report_cron()
