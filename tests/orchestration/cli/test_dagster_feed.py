"""The Dagster half of `sluice up`'s terminal: runs, checks and the report, as lines."""

from __future__ import annotations

import graphql as graphql_core
import pytest
from dagster_graphql.schema import create_schema

from orchestration.cli import dagster_feed
from orchestration.cli.dagster_feed import DagsterFeed, run_lines, summarize

URL = "http://127.0.0.1:3999"


def _run(run_id: str, status: str = "SUCCESS", start: float = 1000.0, end: float = 1042.4):
    return {
        "runId": run_id,
        "jobName": "__ASSET_JOB",
        "status": status,
        "startTime": start,
        "endTime": end,
    }


def _materialized(asset: str, partition: str | None = None, **entries: dict) -> dict:
    return {
        "__typename": "MaterializationEvent",
        "assetKey": {"path": [asset]},
        "partition": partition,
        "metadataEntries": [{"label": k, **v} for k, v in entries.items()],
    }


def _check(asset: str, name: str, passed: bool, severity: str = "ERROR", partition=None) -> dict:
    return {
        "__typename": "AssetCheckEvaluationEvent",
        "evaluation": {
            "checkName": name,
            "assetKey": {"path": [asset]},
            "success": passed,
            "severity": severity,
            "partition": partition,
        },
    }


HOURS = ["2013-02-04-10:00", "2013-02-04-11:00", "2013-02-04-12:00"]
CORRECTION = [
    {"__typename": "ExecutionStepStartEvent"},
    *(_materialized(f"corrected_{v}", h) for v in ("routes_daily", "planes") for h in HOURS),
    *(_check(f"corrected_{v}", "segment_rules", True) for v in ("routes_daily", "planes")),
    _check("corrected_planes", "realtime_within_tolerance", True),
    _check("corrected_routes_daily", "realtime_within_tolerance", False, partition=HOURS[1]),
    _check("corrected_planes", "expectations_pass", False, severity="WARN"),
]


def test_the_graphql_queries_are_valid_for_the_installed_dagster() -> None:
    schema = create_schema().graphql_schema
    for query in (dagster_feed.RUNS, dagster_feed.EVENTS):
        assert graphql_core.validate(schema, graphql_core.parse(query)) == []


def test_a_correction_run_says_its_hours_seconds_and_checks() -> None:
    summary = summarize(_run("r1"), CORRECTION)
    assert summary.corrected_hours == HOURS
    assert run_lines(summary, URL) == [
        "correction  3 hours 2013-02-04-10:00 to 2013-02-04-12:00, 2 views: done in 42s",
        "checks  3 passed, 2 failed: realtime_within_tolerance on corrected_routes_daily "
        "2013-02-04-11:00; expectations_pass on corrected_planes (warning)",
    ]


STEP_FAILED = {
    "__typename": "ExecutionStepFailureEvent",
    "stepKey": "corrected_views",
    "error": {
        "message": "dagster._core.definitions.events.Failure: not corrected: routes_daily\n"
        "corrected_routes_daily: segment rules broken (2 problem(s)):\n"
        "  - column 'arr_delay_mean' fails not-null in 5 row(s)\n"
        "  - column 'latest_plane' fails not-null in 5 row(s)\n"
        f"  - {'x' * 300}\n"
        "  - one more\n"
    },
}


def test_a_failed_run_says_so_why_and_where_to_look() -> None:
    events = [_materialized("corrected_planes", HOURS[0]), STEP_FAILED]
    lines = run_lines(summarize(_run("r2", "FAILURE", 0.0, 95.0), events), URL)
    assert lines == [
        "correction  hour 2013-02-04-10:00, 1 views: FAILED in 1m35s",
        "  why: corrected_views: not corrected: routes_daily",
        "  why: corrected_routes_daily: segment rules broken (2 problem(s)):",
        "  why:   - column 'arr_delay_mean' fails not-null in 5 row(s)",
        "  why:   - column 'latest_plane' fails not-null in 5 row(s)",
        "  why: (and 2 more lines)",
        f"  see: {URL}/runs/r2",
    ]
    long = {**STEP_FAILED, "error": {"message": "ValueError: " + "y" * 400}}
    (why,) = [line for line in run_lines(summarize(_run("r4", "FAILURE"), [long])) if "why" in line]
    start = "corrected_views: ValueError: "  # an undotted exception name stays
    assert why == f"  why: {start}" + "y" * (160 - len(start) - 3) + "..."
    failed = _run("r3", "FAILURE")
    assert run_lines(summarize(failed, []), URL) == ["run: FAILED in 42s", f"  see: {URL}/runs/r3"]
    failed["jobName"] = "recover_stream_task"
    assert run_lines(summarize(failed, []))[0] == "recover_stream_task  run: FAILED in 42s"


def test_the_report_run_says_where_the_report_is() -> None:
    events = [
        _materialized(
            "reconciliation_report",
            "2013-02-04",
            html={"path": "/state/reports/2013-02-04.html"},
            open_html={"url": "file:///state/reports/2013-02-04.html"},
        )
    ]
    assert run_lines(summarize(_run("r4"), events)) == [
        "reconciliation_report (2013-02-04): done in 42s",
        "report  /state/reports/2013-02-04.html",
    ]


def test_a_run_with_nothing_to_tell_is_silent() -> None:
    assert run_lines(summarize(_run("scale"), [{"__typename": "RunSuccessEvent"}])) == []


class FakeWebserver:
    """Answers the feed's two queries from a list of runs and their events."""

    def __init__(self) -> None:
        self.runs: list[dict] = []
        self.events: dict[str, list[dict]] = {}
        self.down = False
        self.asked: list[str] = []

    def __call__(self, url, query, variables=None, timeout_s=10.0):
        if self.down:
            raise ConnectionRefusedError("refused")
        if query is dagster_feed.RUNS:
            return {"runsOrError": {"__typename": "Runs", "results": list(self.runs)}}
        run_id = variables["runId"]
        self.asked.append(run_id)
        events = self.events.get(run_id, [])
        half = len(events) // 2  # two pages: the feed follows the cursor
        if variables["after"] is None:
            page, more = events[:half], True
        else:
            page, more = events[half:], False
        return {
            "logsForRun": {
                "__typename": "EventConnection",
                "cursor": "c1",
                "hasMore": more,
                "events": page,
            }
        }


@pytest.fixture
def webserver(monkeypatch) -> FakeWebserver:
    fake = FakeWebserver()
    monkeypatch.setattr(dagster_feed, "graphql", fake)
    return fake


def test_the_feed_tells_each_ended_run_once_oldest_first(webserver) -> None:
    feed = DagsterFeed(URL, since=500.0)
    webserver.down = True
    assert feed.poll() == []  # the webserver not answering yet is no error
    webserver.down = False
    webserver.runs = [
        _run("running", status="STARTED", end=None),
        _run("old", start=100.0, end=200.0),  # an earlier `up`'s
        _run("report", start=2000.0, end=2010.0),
        _run("correction", start=1000.0, end=1042.4),
    ]
    webserver.events = {
        "correction": CORRECTION,
        "report": [_materialized("reconciliation_report", html={"path": "/r.html"})],
        "old": [_materialized("corrected_planes", HOURS[0])],
    }
    lines = feed.poll()
    assert lines[0].startswith("correction  3 hours")
    assert lines[-1] == "report  /r.html"
    assert len(lines) == 4
    assert feed.poll() == []
    webserver.runs[0] = _run("running", start=3000.0, end=3005.0)
    webserver.events["running"] = [_materialized("corrected_planes", HOURS[2])]
    assert feed.poll() == ["correction  hour 2013-02-04-12:00, 1 views: done in 5s"]
    assert "old" not in webserver.asked
