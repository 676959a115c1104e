"""The report as a self-contained HTML page (jinja2) and a Markdown summary.

The HTML holds the plots (data URIs) and, per view, one table row per hour: corrected or not,
passed, missing and extra groups, max / mean relative error per metric and the causes. The
Markdown is what Dagster shows inline on the ``reconciliation_report`` asset and what
`sluice report` prints: headline counts, notes, failures and the causes' totals.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from pipelines.segments import HOUR_MS
from quality.reconcile import Reconciliation
from quality.report.build import ReportData
from quality.report.plots import ReportPlots

__all__ = ["headline", "hour_spans", "notes", "render_html", "render_json", "render_markdown"]

_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(["html", "j2"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def hour_spans(hours: Iterable[int]) -> str:
    """Hour starts (epoch ms) as UTC spans: ``00:00-08:00, 10:00-24:00``."""
    spans: list[list[int]] = []
    for hour in sorted(hours):
        if spans and hour == spans[-1][1]:
            spans[-1][1] = hour + HOUR_MS
        else:
            spans.append([hour, hour + HOUR_MS])

    def clock(ms: int, end: bool) -> str:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
        return "24:00" if end and moment.hour == 0 else moment.strftime("%H:%M")

    return ", ".join(f"{clock(a, False)}-{clock(b, True)}" for a, b in spans)


def notes(data: ReportData) -> list[str]:
    """What is missing from the day, said plainly."""
    out = []
    with_data = [r for r in data.reconciliations if data.has_data(r)]
    if not with_data:
        out.append(
            f"No archived events or realtime segments for {data.day.isoformat()}: "
            "nothing to reconcile (is this the event-time day of the replay?)."
        )
    else:
        empty = data.empty_hours()
        if empty:
            out.append(f"No data for hours {hour_spans(empty)} (UTC).")
        for view in data.views:
            missing = data.uncorrected_hours(view.name)
            if missing:
                out.append(f"{view.name}: no correction yet for hours {hour_spans(missing)}.")
    if not data.samples:
        out.append("No fleet samples for this day (lag and worker count are recorded by "
                   "`sluice up` / `sluice stream` while they run).")  # fmt: skip
    if data.completeness is None:
        out.append("Archive completeness (quality.lineage) is not available in this build.")
    return out


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _row(data: ReportData, result: Reconciliation, metrics: list[str]) -> dict[str, Any]:
    by_column = {m.column: m for m in (result.comparison.metrics if result.comparison else [])}
    if result.corrected:
        status, css = ("passed", "passed") if result.passed else ("FAILED", "failed")
    elif data.has_data(result):
        status, css = "no correction yet", "uncorrected"
    else:
        status, css = "no data", "nodata"
    errors = []
    for column in metrics:
        metric = by_column.get(column)
        errors.append(
            "-" if metric is None else f"{_percent(metric.rel_max)} / {_percent(metric.rel_mean)}"
        )
    comparison = result.comparison
    return {
        "hour": datetime.fromtimestamp(result.hour_ms / 1000, tz=UTC).strftime("%H:%M"),
        "status": status,
        "css": css,
        "missing": len(comparison.missing) if comparison else "-",
        "extra": len(comparison.extra) if comparison else "-",
        "errors": errors,
        "causes": result.causes,
        "failures": result.failures,
    }


def _completeness_rows(data: ReportData) -> list[dict[str, Any]] | None:
    if data.completeness is None:
        return None
    rows = []
    for item in data.completeness:
        failures = item.get("failures") or ([item["error"]] if "error" in item else [])
        if not (item.get("events") or item.get("dead_letters") or failures):
            continue  # an hour nothing was archived for: nothing to lose
        rows.append(
            {
                "hour": item.get("hour", ""),
                "events": item.get("events", 0),
                "passed": "yes" if item.get("passed") else "NO",
                "details": "; ".join(map(str, failures)),
            }
        )
    return rows


def _dead_letter_fields(data: ReportData) -> list[dict[str, Any]]:
    """Per view and declared field, the day's messages dead-lettered for that field's value
    (missing, of another type, out of range); empty when there were none."""
    return [
        {"view": v.name, "field": name, "dead_letters": n}
        for v in data.views
        for name, n in data.causes_total(v.name).dead_letter_fields
    ]


def render_html(data: ReportData, plots: ReportPlots, root: str = "") -> str:
    """The whole report as one HTML page (plots embedded)."""
    tables = []
    for view in data.views:
        metrics = list(view.metric_columns)
        rows = [_row(data, r, metrics) for r in data.by_view(view.name)]
        tables.append({"view": view.name, "metrics": metrics, "rows": rows})
    totals = [
        {
            "view": v.name,
            **data.causes_total(v.name).as_dict(),
            "sketch_error": _percent(data.sketch_error(v.name)),
        }
        for v in data.views
    ]
    return _TEMPLATES.get_template("reconciliation.html.j2").render(
        day=data.day.isoformat(),
        generated_at=data.generated_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        root=root,
        headline=data.headline(),
        notes=notes(data),
        views=data.views,
        plots=plots,
        causes_totals=totals,
        dead_letter_fields=_dead_letter_fields(data),
        completeness=_completeness_rows(data),
        tables=tables,
    )


def _percent(value: float | None) -> str:
    """A mean relative error as a percentage; a dash where the view has no sketch."""
    return "-" if value is None else f"{value:.2%}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def headline(data: ReportData) -> str:
    """One line: how many view-hours were corrected, passed and failed."""
    h = data.headline()
    return (
        f"{h['views']} views, {h['view_hours']} view-hours ({h['view_hours_with_data']} with "
        f"data): {h['corrected']} corrected, {h['passed']} passed, {h['failed']} failed"
    )


def render_markdown(data: ReportData, html_location: str | None = None) -> str:
    """The summary: headline, notes, failures (view, hour, reason), causes, where the HTML is."""
    lines = [
        f"# Reconciliation report {data.day.isoformat()}",
        "",
        f"**{headline(data)}.** Event-time UTC day; fleet samples: {len(data.samples)}.",
        "",
    ]
    lines += [f"- {note}" for note in notes(data)]
    lines += ["", "## Failures", ""]
    if data.failed:
        lines += ["| view | hour | reason |", "|---|---|---|"]
        for result in data.failed:
            hour = datetime.fromtimestamp(result.hour_ms / 1000, tz=UTC).strftime("%H:%M")
            for reason in result.failures or ["failed"]:
                lines.append(f"| {result.view} | {hour} | {_cell(reason)} |")
    else:
        lines.append(
            "None: every corrected hour is explained by its causes."
            if data.corrected
            else "None (no hour of this day has been corrected yet)."
        )
    lines += [
        "",
        "## Causes (day totals)",
        "",
        "| view | events | duplicates | late dropped | dead letters | sketch error |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for view in data.views:
        c = data.causes_total(view.name)
        lines.append(
            f"| {view.name} | {c.events:,} | {c.duplicates:,} | {c.late_dropped:,} "
            f"| {c.dead_letters:,} | {_percent(data.sketch_error(view.name))} |"
        )
    by_field = _dead_letter_fields(data)
    if by_field:
        lines += [
            "",
            "## Dead letters per field (day totals)",
            "",
            "| view | field | dead letters |",
            "|---|---|---:|",
        ]
        lines += [
            f"| {row['view']} | {row['field']} | {row['dead_letters']:,} |" for row in by_field
        ]
    if html_location:
        lines += ["", f"Full report with plots: `{html_location}`"]
    return "\n".join(lines) + "\n"


def render_json(data: ReportData) -> str:
    """Machine-readable: headline, notes, every reconciliation's summary, the fleet samples."""
    document = {
        "day": data.day.isoformat(),
        "generated_at": data.generated_at.isoformat(),
        "headline": data.headline(),
        "notes": notes(data),
        "views": [v.name for v in data.views],
        "causes_total": {v.name: data.causes_total(v.name).as_dict() for v in data.views},
        "reconciliations": [r.summary() for r in data.reconciliations],
        "series": {
            name: {
                "metric": s.metric,
                "windows": s.windows,
                "realtime": s.realtime,
                "corrected": s.corrected,
            }
            for name, s in data.series.items()
        },
        "fleet_samples": [s.__dict__ for s in data.samples],
        "completeness": data.completeness,
    }
    return json.dumps(document, indent=2, default=str)
