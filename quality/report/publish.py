"""Build, draw, render and store a day's reconciliation report: what the CLI and the asset call."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date

from pipelines.control import ControlStore
from pipelines.segments import report_keys
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views import View
from quality.compare import Tolerance
from quality.report.build import ReportData, build_report, parse_day
from quality.report.plots import render_plots
from quality.report.render import render_html, render_json, render_markdown
from quality.report.store import StoredReport, report_location, write_report

__all__ = ["publish_report"]

log = logging.getLogger(__name__)


def publish_report(
    store: ObjectStore,
    control: ControlStore | None,
    views: Sequence[View],
    day: date | str,
    tolerance: Tolerance | None = None,
    topic: str | None = None,
    *,
    tables: Tables,
) -> tuple[ReportData, StoredReport]:
    """The report of ``day`` (event-time UTC) written under ``reports/<day>/`` of ``store``
    (the corrections read from ``tables``)."""
    day = parse_day(day)
    data = build_report(store, control, views, day, tolerance, topic, tables=tables)
    path, uri = report_location(store, report_keys(day)["html"])
    markdown = render_markdown(data, str(path) if path else uri)
    html = render_html(data, render_plots(data), root=store.root)
    stored = write_report(store, day, html, markdown, render_json(data))
    log.info("reconciliation report of %s written to %s", day, stored.html_location)
    return data, stored
