"""The Dagster half of `sluice up`'s terminal: each run as it lands, in a line or three.

A correction run says which hours it corrected and in how many seconds, every run says which
checks passed and which failed, and the report's run says where the report is. The feed asks
the webserver `up` started (GraphQL over HTTP: `up`'s process imports no Dagster) for the
runs it has not shown yet, and each new run's events once it ended; :func:`summarize` and
:func:`run_lines` turn those answers into lines without a webserver, for the tests.
"""

from __future__ import annotations

import re
import urllib.error
from dataclasses import dataclass, field
from typing import Any

from assets.constants import CORRECTED_PREFIX, RECONCILIATION_REPORT_KEY
from orchestration.control_plane.dagster_service import DagsterStartError, graphql

__all__ = ["CheckResult", "DagsterFeed", "RunSummary", "run_lines", "summarize"]

RUNS = """
query Runs($limit: Int!) {
  runsOrError(limit: $limit) {
    __typename
    ... on Runs { results { runId jobName status startTime endTime } }
  }
}
"""
EVENTS = """
query Events($runId: ID!, $after: String) {
  logsForRun(runId: $runId, afterCursor: $after) {
    __typename
    ... on EventConnection {
      cursor
      hasMore
      events {
        __typename
        ... on MaterializationEvent {
          assetKey { path }
          partition
          metadataEntries {
            label
            ... on PathMetadataEntry { path }
            ... on UrlMetadataEntry { url }
          }
        }
        ... on AssetCheckEvaluationEvent {
          evaluation { checkName assetKey { path } success severity partition }
        }
        ... on ExecutionStepFailureEvent { stepKey error { message } }
      }
    }
  }
}
"""
ENDED = ("SUCCESS", "FAILURE", "CANCELED")
REPORT = "/".join(RECONCILIATION_REPORT_KEY.path)


@dataclass(frozen=True)
class CheckResult:
    asset: str
    check: str
    passed: bool
    severity: str
    """ERROR or WARN: a failed WARN check does not fail its run."""
    partition: str | None = None


@dataclass
class RunSummary:
    """One ended run, as the terminal tells it."""

    run_id: str
    job: str
    status: str
    seconds: float | None
    materialized: dict[str, list[str]] = field(default_factory=dict)
    """Asset -> the partitions (hours, days) it materialized; [] for an unpartitioned one."""
    checks: list[CheckResult] = field(default_factory=list)
    report: str | None = None
    """Where the report is (its HTML's path or URL), when the run wrote one."""
    failures: list[str] = field(default_factory=list)
    """Each failed step's error, as the step raised it."""

    @property
    def corrected_hours(self) -> list[str]:
        return sorted(
            {p for a, ps in self.materialized.items() if a.startswith(CORRECTED_PREFIX) for p in ps}
        )

    @property
    def corrected_views(self) -> list[str]:
        return sorted(a for a in self.materialized if a.startswith(CORRECTED_PREFIX))


def summarize(run: dict[str, Any], events: list[dict[str, Any]]) -> RunSummary:
    """A run (``runsOrError``'s result) and its events (``logsForRun``'s) as a summary."""
    start, end = run.get("startTime"), run.get("endTime")
    summary = RunSummary(
        run_id=run["runId"],
        job=run.get("jobName") or "?",
        status=run.get("status") or "?",
        seconds=end - start if start is not None and end is not None else None,
    )
    for event in events:
        kind = event.get("__typename")
        if kind == "MaterializationEvent":
            asset = "/".join(event["assetKey"]["path"])
            partitions = summary.materialized.setdefault(asset, [])
            if event.get("partition"):
                partitions.append(event["partition"])
            if asset == REPORT:
                entries = {e.get("label"): e for e in event.get("metadataEntries") or []}
                where = entries.get("html", {}).get("path") or entries.get("open_html", {}).get(
                    "url"
                )
                summary.report = where or summary.report
        elif kind == "ExecutionStepFailureEvent":
            message = ((event.get("error") or {}).get("message") or "").strip()
            summary.failures.append(f"{event.get('stepKey') or 'a step'}: {message}")
        elif kind == "AssetCheckEvaluationEvent":
            evaluation = event["evaluation"]
            summary.checks.append(
                CheckResult(
                    asset="/".join(evaluation["assetKey"]["path"]),
                    check=evaluation["checkName"],
                    passed=bool(evaluation["success"]),
                    severity=evaluation.get("severity") or "ERROR",
                    partition=evaluation.get("partition"),
                )
            )
    return summary


def _seconds(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(round(seconds), 60)
    return f" in {minutes}m{secs:02d}s" if minutes else f" in {seconds:.0f}s"


def _hours(hours: list[str]) -> str:
    if len(hours) == 1:
        return f"hour {hours[0]}"
    return f"{len(hours)} hours {hours[0]} to {hours[-1]}"


def _outcome(summary: RunSummary) -> str:
    return {"SUCCESS": "done", "FAILURE": "FAILED", "CANCELED": "canceled"}.get(
        summary.status, summary.status.lower()
    ) + _seconds(summary.seconds)


def _job(summary: RunSummary) -> str:
    """The run's job, unless it is Dagster's implicit one for a selection of assets."""
    return "" if summary.job.startswith("__") else f"{summary.job}  "


def run_lines(summary: RunSummary, url: str | None = None) -> list[str]:
    """What the terminal says of an ended run: its corrections, other materializations, checks
    and report; nothing for a run that succeeded without either (a scaling run, say)."""
    lines = []
    hours = summary.corrected_hours
    views = summary.corrected_views
    if views:
        what = _hours(hours) if hours else "no hour"
        lines.append(f"correction  {what}, {len(views)} views: {_outcome(summary)}")
    others = sorted(a for a in summary.materialized if not a.startswith(CORRECTED_PREFIX))
    if others:
        partitions = sorted({p for a in others for p in summary.materialized[a]})
        on = f" ({', '.join(partitions)})" if partitions else ""
        lines.append(f"{_job(summary)}{', '.join(others)}{on}: {_outcome(summary)}")
    if summary.checks:
        passed = sum(c.passed for c in summary.checks)
        failed = [c for c in summary.checks if not c.passed]
        line = f"checks  {passed} passed, {len(failed)} failed"
        if failed:
            line += ": " + "; ".join(
                f"{c.check} on {c.asset}{f' {c.partition}' if c.partition else ''}"
                f"{' (warning)' if c.severity == 'WARN' else ''}"
                for c in failed
            )
        lines.append(line)
    if summary.report:
        lines.append(f"report  {summary.report}")
    if not lines and summary.status != "SUCCESS":
        lines.append(f"{_job(summary)}run: {_outcome(summary)}")
    if summary.status == "FAILURE":
        lines += [f"  why: {line}" for line in _why(summary.failures)]
        if url:
            lines.append(f"  see: {url.rstrip('/')}/runs/{summary.run_id}")
    return lines


WHY_LINES = 4
WHY_WIDTH = 160
_RAISED = re.compile(r"^(?:[A-Za-z_][\w]*\.)+[A-Za-z_]\w*: ")


def _why(failures: list[str]) -> list[str]:
    """The first lines of the first failed step's error, without the exception's dotted class
    (``dagster._core.definitions.events.Failure: ``); the rest is on the run's page."""
    if not failures:
        return []
    lines = [line.rstrip() for line in failures[0].splitlines() if line.strip()]
    step, _, first = lines[0].partition(": ")
    lines[0] = f"{step}: {_RAISED.sub('', first)}"
    shown = [line if len(line) <= WHY_WIDTH else line[: WHY_WIDTH - 3] + "..." for line in lines]
    if len(shown) > WHY_LINES:
        shown = [*shown[:WHY_LINES], f"(and {len(shown) - WHY_LINES} more lines)"]
    return shown


class DagsterFeed:
    """The lines of the runs that ended since the last :meth:`poll` (each run once)."""

    def __init__(
        self, url: str, since: float | None = None, limit: int = 50, timeout_s: float = 5.0
    ) -> None:
        self.url = url
        self.since = since
        """Runs that started before (epoch seconds: an earlier `up`'s, in a kept state
        directory) are not shown."""
        self.limit = limit
        self.timeout_s = timeout_s
        self.shown: set[str] = set()

    def poll(self) -> list[str]:
        """Lines of newly ended runs, oldest first; [] while the webserver does not answer."""
        try:
            answer = graphql(self.url, RUNS, {"limit": self.limit}, self.timeout_s)
        except (OSError, urllib.error.URLError, DagsterStartError, ValueError):
            return []
        runs = (answer.get("runsOrError") or {}).get("results") or []
        ended = [
            r
            for r in runs
            if r.get("status") in ENDED
            and r["runId"] not in self.shown
            and (self.since is None or (r.get("startTime") or 0) >= self.since)
        ]
        lines: list[str] = []
        for run in sorted(ended, key=lambda r: r.get("endTime") or 0):
            try:
                events = self._events(run["runId"])
            except (OSError, urllib.error.URLError, DagsterStartError, ValueError):
                break  # asked again at the next poll
            self.shown.add(run["runId"])
            lines += run_lines(summarize(run, events), self.url)
        return lines

    def _events(self, run_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after = None
        while True:
            answer = graphql(self.url, EVENTS, {"runId": run_id, "after": after}, self.timeout_s)[
                "logsForRun"
            ]
            if answer.get("__typename") != "EventConnection":
                return events
            events += answer["events"]
            if not answer.get("hasMore"):
                return events
            after = answer["cursor"]
