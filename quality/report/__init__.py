"""The daily reconciliation report: realtime vs corrected per view and hour, its causes, the
fleet's lag and size, as one HTML page with plots plus a Markdown summary under the storage
root (``reports/<day>/``). `sluice report` and the ``reconciliation_report`` asset call
:func:`publish_report`.

May import: ``pipelines`` and the rest of ``quality``.
"""

from pipelines.segments import report_keys
from quality.exceptions import InvalidReportDay
from quality.report.build import ReportData, ViewSeries, build_report, day_bounds, parse_day
from quality.report.plots import ReportPlots, render_plots
from quality.report.publish import publish_report
from quality.report.render import headline, render_html, render_json, render_markdown
from quality.report.store import StoredReport, write_report

__all__ = [
    "InvalidReportDay",
    "ReportData",
    "ReportPlots",
    "StoredReport",
    "ViewSeries",
    "build_report",
    "day_bounds",
    "headline",
    "parse_day",
    "publish_report",
    "render_html",
    "render_json",
    "render_markdown",
    "render_plots",
    "report_keys",
    "write_report",
]
