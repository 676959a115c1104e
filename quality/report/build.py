"""Gather what a day's reconciliation report shows, from the storage root and the control store.

The day is an event-time UTC day: the windows whose start falls in it. For every enabled view
and each of its 24 hours: the reconciliation (:func:`quality.reconcile.reconcile`), and over
the day one realtime and one corrected series (a count, or the first exact numeric metric,
summed over groups per window). From the control store: the fleet samples whose watermark lies
in the day, so a replay's lag and worker count land on the day it replays. Nothing here draws
or formats; :mod:`quality.report.plots` and :mod:`quality.report.render` do.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.aggregators import Measure
from pipelines.control import ControlStore, FleetSample
from pipelines.kinds import kind_of
from pipelines.segments import HOUR_MS
from pipelines.serving import query_view
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views import View
from quality.causes import Causes
from quality.compare import APPROXIMATE, EXACT, Tolerance, metric_kinds
from quality.exceptions import InvalidReportDay
from quality.reconcile import Reconciliation, reconcile

__all__ = ["DAY_MS", "ReportData", "ViewSeries", "build_report", "day_bounds", "parse_day"]

log = logging.getLogger(__name__)

DAY_MS = 24 * HOUR_MS
EARLIEST_DAY = date(2000, 1, 1)
"""Event times before this are not traffic Sluice could have archived."""


def parse_day(text: str | date) -> date:
    """``YYYY-MM-DD`` (UTC) -> date; a clear :class:`InvalidReportDay` for anything else."""
    if isinstance(text, date):
        day = text
    else:
        try:
            day = date.fromisoformat(str(text).strip())
        except ValueError:
            raise InvalidReportDay(
                f"day {text!r} is not a UTC date written YYYY-MM-DD (e.g. 2014-07-01)"
            ) from None
        if len(str(text).strip()) != 10:  # fromisoformat also takes 20140701
            raise InvalidReportDay(f"day {text!r} is not written YYYY-MM-DD (e.g. 2014-07-01)")
    tomorrow = datetime.now(UTC).date() + timedelta(days=1)
    if not EARLIEST_DAY <= day <= tomorrow:
        raise InvalidReportDay(
            f"day {day.isoformat()} is outside {EARLIEST_DAY.isoformat()} .. "
            f"{tomorrow.isoformat()}: no event time of it can have been archived"
        )
    return day


def day_bounds(day: date) -> tuple[int, int]:
    """Epoch ms of ``[day 00:00, next day 00:00)`` UTC."""
    start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
    return start, start + DAY_MS


@dataclass(frozen=True)
class ViewSeries:
    """One metric of a view over the day, summed over its groups per window."""

    view: str
    metric: str | None
    """None when the view has no numeric metric to draw."""
    windows: list[int] = field(default_factory=list)
    """Window starts (epoch ms) present on either side, sorted."""
    realtime: list[float | None] = field(default_factory=list)
    corrected: list[float | None] = field(default_factory=list)
    """None where the window's hour has no published correction."""

    @property
    def has_realtime(self) -> bool:
        return any(v is not None for v in self.realtime)

    @property
    def has_corrected(self) -> bool:
        return any(v is not None for v in self.corrected)


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows for one event-time day."""

    day: date
    views: list[View]
    reconciliations: list[Reconciliation]
    series: dict[str, ViewSeries]
    samples: list[FleetSample]
    completeness: list[dict[str, Any]] | None = None
    """Per hour, whether the archive lost nothing (quality.lineage), when available."""
    generated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def start_ms(self) -> int:
        return day_bounds(self.day)[0]

    @property
    def hours(self) -> list[int]:
        return list(range(self.start_ms, self.start_ms + DAY_MS, HOUR_MS))

    def by_view(self, view: str) -> list[Reconciliation]:
        return [r for r in self.reconciliations if r.view == view]

    @property
    def corrected(self) -> list[Reconciliation]:
        return [r for r in self.reconciliations if r.corrected]

    @property
    def failed(self) -> list[Reconciliation]:
        return [r for r in self.reconciliations if not r.passed]

    def has_data(self, result: Reconciliation) -> bool:
        """The archive or the realtime segments hold something for the view-hour."""
        if result.corrected or result.causes.events or result.causes.dead_letters:
            return True
        series = self.series.get(result.view)
        if series is None:
            return False
        end = result.hour_ms + HOUR_MS
        return any(
            result.hour_ms <= w < end and v is not None
            for w, v in zip(series.windows, series.realtime, strict=True)
        )

    def uncorrected_hours(self, view: str) -> list[int]:
        """Hours with data but no published correction yet."""
        return [r.hour_ms for r in self.by_view(view) if not r.corrected and self.has_data(r)]

    def empty_hours(self) -> list[int]:
        """Hours no view has any data for."""
        return [
            h
            for h in self.hours
            if not any(self.has_data(r) for r in self.reconciliations if r.hour_ms == h)
        ]

    def causes_total(self, view: str | None = None) -> Causes:
        total = Causes()
        for result in self.reconciliations:
            if view is None or result.view == view:
                total = total + result.causes
        return total

    def causes_by_hour(self, view: str) -> dict[int, Causes]:
        return {r.hour_ms: r.causes for r in self.by_view(view)}

    def sketch_error(self, view: str) -> float | None:
        """Mean relative error of the view's sketch (HLL, KLL) rows over the day, or None."""
        errors = [
            e
            for result in self.by_view(view)
            if result.comparison
            for metric in result.comparison.metrics
            if metric.kind == APPROXIMATE
            for e in metric.rel_errors
        ]
        return sum(errors) / len(errors) if errors else None

    def rel_errors_by_kind(self) -> dict[str, list[float]]:
        """Every per-row relative error of the day, pooled by metric kind."""
        pooled: dict[str, list[float]] = defaultdict(list)
        for result in self.corrected:
            for metric in result.comparison.metrics if result.comparison else []:
                pooled[metric.kind].extend(getattr(metric, "rel_errors", ()))
        return dict(pooled)

    def headline(self) -> dict[str, int]:
        return {
            "views": len(self.views),
            "view_hours": len(self.reconciliations),
            "view_hours_with_data": sum(1 for r in self.reconciliations if self.has_data(r)),
            "corrected": len(self.corrected),
            "passed": sum(1 for r in self.corrected if r.passed),
            "failed": len(self.failed),
            "fleet_samples": len(self.samples),
        }


def series_metric(view: View) -> str | None:
    """What to draw for ``view``: its count of all events if it has one, else its first exact
    numeric metric."""
    kinds = metric_kinds(view)
    numeric = {
        f.name
        for f in view.output_schema()
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    }
    for agg in view.aggregators:
        if agg.description.measure is Measure.COUNT and agg.where is None:
            return agg.out
    exact = [c for c in view.metric_columns if c in numeric and kinds.get(c) == EXACT]
    if exact:
        return exact[0]
    approximate = [c for c in view.metric_columns if c in numeric]
    return approximate[0] if approximate else None


def _sums(table: pa.Table, metric: str, view: View) -> dict[int, float]:
    """Sums of ``metric`` per window (per start hour of the sessions, for a session view)."""
    kind = kind_of(view)
    column, size = kind.time_columns[0], kind.sum_bucket_ms
    values = table.column(metric)
    valid = np.asarray(values.is_valid(), dtype=bool)
    if not valid.any():
        return {}
    starts = table.column(column)
    if pa.types.is_timestamp(starts.type):
        starts = starts.cast(pa.timestamp("ms", tz=starts.type.tz), safe=False)
    ms = starts.cast(pa.int64()).to_numpy()[valid]
    numbers = values.cast(pa.float64()).to_numpy(zero_copy_only=False)[valid]
    windows, at = np.unique(ms - ms % size, return_inverse=True)
    sums = np.zeros(len(windows))
    for position, number in zip(at.tolist(), numbers.tolist(), strict=True):
        sums[position] += number  # in row order, as Python's running sum adds them
    return dict(zip(windows.tolist(), sums.tolist(), strict=True))


def view_series(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    read: Mapping[int, tuple[pa.Table, pa.Table]] | None = None,
    *,
    tables: Tables,
) -> ViewSeries:
    """Realtime and corrected sums of :func:`series_metric` per window of ``[start, end)``.

    ``read``: (corrected, realtime) of hours already read (by the reconciliation); the other
    hours are queried."""
    metric = series_metric(view)
    if metric is None:
        return ViewSeries(view.name, None)
    read = read or {}
    hours = range(start_ms - start_ms % HOUR_MS, end_ms, HOUR_MS)
    if not any(h in read for h in hours):
        sides = [
            (query_view(store, view, start_ms, end_ms, prefer="batch", tables=tables),
             query_view(store, view, start_ms, end_ms, prefer="realtime", tables=tables))
        ]  # fmt: skip
    else:
        sides = [
            read[h]
            if h in read
            else (
                query_view(store, view, h, h + HOUR_MS, prefer="batch", tables=tables),
                query_view(store, view, h, h + HOUR_MS, prefer="realtime", tables=tables),
            )
            for h in hours
        ]
    corrected: dict[int, float] = {}
    realtime: dict[int, float] = {}
    for batch_rows, realtime_rows in sides:
        corrected.update(_sums(batch_rows, metric, view))
        realtime.update(_sums(realtime_rows, metric, view))
    windows = sorted(w for w in set(realtime) | set(corrected) if start_ms <= w < end_ms)
    return ViewSeries(
        view.name,
        metric,
        windows,
        [realtime.get(w) for w in windows],
        [corrected.get(w) for w in windows],
    )


def _completeness(store: ObjectStore, hours: Sequence[int]) -> list[dict[str, Any]] | None:
    """quality.lineage's nothing-lost check per hour, if that module is installed."""
    try:
        from quality.lineage import check_nothing_lost
    except ImportError:
        return None
    try:
        return [result.as_dict() for result in check_nothing_lost(store, hours)]
    except Exception as exc:  # an extra table must not cost the whole report
        log.warning("archive completeness is left out of the report: %s", exc)
        return [{"error": str(exc)}]


def build_report(
    store: ObjectStore,
    control: ControlStore | None,
    views: Sequence[View],
    day: date | str,
    tolerance: Tolerance | None = None,
    topic: str | None = None,
    *,
    tables: Tables,
) -> ReportData:
    """Reconcile every enabled view for the 24 hours of ``day`` and gather series and samples.

    ``control`` None (or ``topic`` of no sample) leaves the fleet section empty, with a note.
    """
    day = parse_day(day)
    start_ms, end_ms = day_bounds(day)
    enabled = [v for v in views if not v.disabled]
    hours = list(range(start_ms, end_ms, HOUR_MS))
    read: dict[str, dict[int, tuple[pa.Table, pa.Table]]] = defaultdict(dict)

    def keep(view: View, hour: int, corrected: pa.Table, realtime: pa.Table) -> None:
        read[view.name][hour] = (corrected, realtime)

    reconciliations = reconcile(store, enabled, hours, tolerance, on_tables=keep, tables=tables)
    series = {
        v.name: view_series(store, v, start_ms, end_ms, read[v.name], tables=tables)
        for v in enabled
    }
    samples = control.fleet_samples(topic, start_ms, end_ms) if control is not None else []
    return ReportData(
        day=day,
        views=enabled,
        reconciliations=reconciliations,
        series=series,
        samples=samples,
        completeness=_completeness(store, hours),
    )
