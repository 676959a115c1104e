"""The report's plots as PNG data URIs, so the HTML page is one self-contained file.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot, no display, safe
in Dagster's run workers). Each function returns None when there is nothing to draw; the page
then shows a note instead of an empty axis.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import DateFormatter
from matplotlib.figure import Figure

from pipelines.control import FleetSample
from quality.report.build import ReportData, ViewSeries

__all__ = [
    "ReportPlots",
    "causes_plot",
    "error_histogram",
    "fleet_plot",
    "render_plots",
    "series_plot",
]

REALTIME_COLOR = "#1f77b4"
CORRECTED_COLOR = "#d62728"
CAUSE_COLORS = {"late_dropped": "#ff7f0e", "duplicates": "#9467bd", "dead_letters": "#7f7f7f"}
HOURS_FORMAT = DateFormatter("%H:%M", tz=UTC)


@dataclass(frozen=True)
class ReportPlots:
    """Data URIs (``data:image/png;base64,...``) of every plot; None where nothing to draw."""

    series: dict[str, str | None]
    errors: str | None
    fleet: str | None
    causes: str | None


def _data_uri(figure: Figure) -> str:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _times(epoch_ms: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(ms / 1000, tz=UTC) for ms in epoch_ms]


def series_plot(series: ViewSeries) -> str | None:
    """Realtime vs corrected over the day: realtime as a line, corrected as markers on it."""
    if series.metric is None or not series.windows:
        return None
    figure = Figure(figsize=(9, 2.8), layout="constrained")
    ax = figure.add_subplot()
    times = _times(series.windows)
    realtime = [np.nan if v is None else v for v in series.realtime]
    corrected = [np.nan if v is None else v for v in series.corrected]
    ax.plot(times, realtime, color=REALTIME_COLOR, linewidth=1.2, label="realtime")
    if series.has_corrected:
        ax.plot(
            times, corrected, color=CORRECTED_COLOR, linestyle="none", marker=".",
            markersize=5, label="corrected",
        )  # fmt: skip
    ax.set_title(f"{series.view}: {series.metric} per window (sum over groups)", fontsize=10)
    ax.set_ylabel(series.metric)
    ax.xaxis.set_major_formatter(HOURS_FORMAT)
    ax.set_xlabel("event time (UTC)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _data_uri(figure)


def error_histogram(errors_by_kind: dict[str, list[float]]) -> str | None:
    """Distribution of per-row relative errors (realtime vs corrected), one histogram per kind."""
    pooled = {kind: np.asarray(v, dtype=float) for kind, v in errors_by_kind.items() if v}
    if not pooled:
        return None
    top = max(float(v.max()) for v in pooled.values())
    bins = np.linspace(0.0, top if top > 0 else 1e-9, 31)
    figure = Figure(figsize=(9, 2.8), layout="constrained")
    ax = figure.add_subplot()
    for kind, values in sorted(pooled.items()):
        exact_share = float((values == 0).mean())
        ax.hist(
            values, bins=bins, histtype="step", linewidth=1.5,
            label=f"{kind} ({len(values):,} rows, {exact_share:.0%} equal)",
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_title("relative error per row (realtime vs corrected)", fontsize=10)
    ax.set_xlabel("|realtime - corrected| / |corrected|")
    ax.set_ylabel("rows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _data_uri(figure)


def fleet_plot(samples: Sequence[FleetSample]) -> str | None:
    """Time lag (left axis) and worker count (right axis) over the day's event time."""
    if not samples:
        return None
    ordered = sorted(samples, key=lambda s: (s.min_watermark_ms or 0, s.sampled_at))
    times = _times([s.min_watermark_ms or 0 for s in ordered])
    lag = [np.nan if s.max_time_lag_s is None else s.max_time_lag_s for s in ordered]
    figure = Figure(figsize=(9, 2.8), layout="constrained")
    ax = figure.add_subplot()
    ax.plot(times, lag, color=REALTIME_COLOR, marker=".", markersize=3, label="max time lag")
    ax.set_ylabel("time lag (s)", color=REALTIME_COLOR)
    ax.set_xlabel("event time the fleet had reached (UTC)")
    ax.xaxis.set_major_formatter(HOURS_FORMAT)
    ax.grid(alpha=0.3)
    workers = ax.twinx()
    workers.step(
        times, [s.workers for s in ordered], where="post", color=CORRECTED_COLOR, label="workers"
    )
    workers.set_ylabel("workers", color=CORRECTED_COLOR)
    workers.set_ylim(0, max(s.workers for s in ordered) + 1)
    workers.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("stream lag and worker count over the day", fontsize=10)
    return _data_uri(figure)


def causes_plot(data: ReportData) -> str | None:
    """Per view, stacked bars per hour: late dropped, duplicates, dead letters."""
    if not data.views or not any(
        r.causes.late_dropped or r.causes.duplicates or r.causes.dead_letters
        for r in data.reconciliations
    ):
        return None
    figure = Figure(figsize=(9, 1.0 + 1.7 * len(data.views)), layout="constrained")
    axes = figure.subplots(len(data.views), 1, sharex=True, squeeze=False)[:, 0]
    hours = np.arange(24)
    for ax, view in zip(axes, data.views, strict=True):
        by_hour = data.causes_by_hour(view.name)
        bottom = np.zeros(24)
        for cause, color in CAUSE_COLORS.items():
            values = np.array(
                [getattr(by_hour[h], cause) if h in by_hour else 0 for h in data.hours], float
            )
            ax.bar(hours, values, bottom=bottom, color=color, label=cause.replace("_", " "))
            bottom += values
        ax.set_ylabel(view.name, fontsize=8, rotation=0, ha="right", va="center")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, ncols=3, loc="upper left")
    axes[0].set_title("causes of error per hour (events)", fontsize=10)
    axes[-1].set_xticks(hours[::2], [f"{h:02d}" for h in hours[::2]])
    axes[-1].set_xlabel("hour of the day (event time, UTC)")
    return _data_uri(figure)


def render_plots(data: ReportData) -> ReportPlots:
    """Every plot of the report."""
    return ReportPlots(
        series={name: series_plot(s) for name, s in data.series.items()},
        errors=error_histogram(data.rel_errors_by_kind()),
        fleet=fleet_plot(data.samples),
        causes=causes_plot(data),
    )
