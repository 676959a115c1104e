"""Reconcile a windowed view's realtime values with its correction, hour by hour, and say why they differ.

For each view and hour with a published correction: realtime vs corrected per window, group
and metric (:func:`quality.compare.compare_tables`), and the causes counted from the archive
(:mod:`quality.causes`). Then each difference is either explained or not, by the rule each
aggregation's description names (:class:`~pipelines.aggregators.Reconciled`):

- ``count`` (``EVENT_COUNT``): realtime must equal exact + duplicate deliveries - late drops
  of its window and group, exactly. Anything else is unexplained (lost or double-counted data).
- other exact aggregations (``EXACT``: sum, min, max, mean, count_distinct, first, last,
  variance, stddev, ratio, count_if, sum_if, any_value, max_by, min_by, mode): a row may differ
  only if its window and group had duplicate or late events.
- HLL and theta estimates (``REPRODUCED_SKETCH``: ``approx_count_distinct``, ``hll_bounds``,
  ``theta_distinct``, ``theta_bounds``): the correction keeps Spark's own sketch of the window
  (``hll_sketch_agg``, ``theta_sketch_agg``: the same DataSketches sketch, HLL_8 at the same
  ``lg_k``, seed 9001), whose estimate must equal the stream's exactly where no event was late
  (duplicates change no distinct count); rows with late drops within ``hll_sigmas`` RSEs of the
  exact count (or lower). Their bounds columns are reported.
- KLL (``quantiles``, ``cdf``, ``histogram``: ``QUANTILE_RANK``, ``SHARE_RANK``, ``BIN_RANK``):
  rank error within the sketch's normalized rank error (a quantile's rank among the window's
  exact values, a CDF's share, a bin's count over the window's size), rows without duplicates or late drops; ``hll_outside_share`` of the rows
  (and one) may exceed it (the bound holds with 99% confidence).
- ``frequent_items`` (``FREQUENCY_BOUNDS``): every item both lists hold has its exact count
  within the realtime [lower, upper]. ``top_k`` (``REPORTED``): reported, never failing.
- groups the stream lacks are explained when every event of the group came late; groups only
  the stream has are never explained.

An exact metric (or the groups) fails when unexplained rows exceed ``unexplained_share`` of the
rows compared (0 by default: every difference must have a cause). No Dagster imports; the
blocking asset checks and the report use it.

Session views are reconciled by :mod:`quality.reconcile.sessions` (sessions missing, extra,
and per metric, with the duplicates and late drops of each session's span as causes).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipelines.aggregators import Aggregator, Reconciled
from pipelines.segments import HOUR_MS, hour_label, hour_runs
from pipelines.serving import corrected_segments, query_view, window_states
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import View
from quality.causes import (
    GroupCauses,
    HourArchive,
    archive_columns,
    id_column,
    read_hour_archive,
    view_causes,
    window_values,
)
from quality.compare import (
    EXACT,
    Comparison,
    Tolerance,
    compare_tables,
    key_value,
    metric_kinds,
    rows_by_key,
    view_keys,
)
from quality.reconcile.metrics import (
    NO_CAUSES,
    CausesOf,
    Pairs,
    allowed_unexplained,
    close,
    exact_metric,
    frequent_items_metric,
    other_metric,
    rank_metric,
    reproduced_metric,
)
from quality.reconcile.results import MetricReconciliation, Reconciliation, TablesRead

__all__ = ["CorrectedStates", "reconcile_hour"]


def _lookup(causes: dict[tuple, GroupCauses]) -> CausesOf:
    return lambda key: causes.get(key, NO_CAUSES)


def _count_judge(_key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
    if expected is None or actual is None:
        return close(expected, actual) or why.explains_difference
    return int(actual) - int(expected) == why.stream_count_offset


def _exact_judge(_key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
    return close(expected, actual) or why.explains_difference


def _exact_metric(
    column: str, agg: Aggregator, pairs: Pairs, causes_of: CausesOf, tolerance: Tolerance
) -> MetricReconciliation:
    if agg.description.reconciled is Reconciled.EVENT_COUNT:
        judge, rule = _count_judge, "realtime = exact + duplicates - late drops"
    else:
        judge, rule = _exact_judge, "differences only where duplicates or late drops occurred"
    return exact_metric(column, EXACT, agg.name, pairs, causes_of, judge, rule, tolerance)


def _metrics(
    view: View,
    comparison: Comparison,
    pairs_by_column: dict[str, Pairs],
    causes: dict[tuple, GroupCauses],
    tolerance: Tolerance,
    checks: _Evidence,
) -> list[MetricReconciliation]:
    kinds = metric_kinds(view)
    causes_of = _lookup(causes)
    result = []
    for index, agg in enumerate(view.aggregators):
        how = agg.description.reconciled
        for position, out in enumerate(agg.output_fields()):
            column, kind = out.name, kinds[out.name]
            pairs = pairs_by_column[column]
            if how is Reconciled.FREQUENCY_BOUNDS:
                result.append(frequent_items_metric(column, pairs, causes_of, tolerance))
            elif kind == EXACT:
                result.append(_exact_metric(column, agg, pairs, causes_of, tolerance))
            elif how is Reconciled.REPRODUCED_SKETCH and position == 0:
                rse = agg.relative_standard_error()  # type: ignore[attr-defined]
                reproduced = checks.estimates(index, column)
                result.append(
                    reproduced_metric(
                        column, agg.name, rse, pairs, causes_of, tolerance, reproduced
                    )
                )
            elif how.rank_error:
                epsilon = agg.rank_error()  # type: ignore[attr-defined]
                error_of = checks.rank_error_of(agg, column)
                result.append(
                    rank_metric(column, agg.name, epsilon, pairs, causes_of, tolerance, error_of)
                )
            else:
                result.append(other_metric(column, kind, agg.name, comparison))
    return result


class CorrectedStates:
    """The correction's states of a view (its sketches), per hour of a pass: read from the
    view's table once per run of consecutive hours, when a judge first asks."""

    def __init__(
        self, store: ObjectStore, tables: Tables, view: View, hours: Sequence[int]
    ) -> None:
        self.store, self.tables, self.view = store, tables, view
        self.runs = hour_runs(hours)
        self._hours: dict[int, dict[tuple, list[Any]]] = {}

    def of_hour(self, hour_ms: int) -> dict[tuple, list[Any]]:
        """(window start as compared, *groups) -> one state per aggregation, for the windows
        starting in the hour."""
        if hour_ms not in self._hours:
            start, end = next(
                ((s, e) for s, e in self.runs if s <= hour_ms < e), (hour_ms, hour_ms + HOUR_MS)
            )
            found = window_states(
                self.store, self.view, start, end, prefer="batch", tables=self.tables
            )
            by_hour: dict[int, dict[tuple, list[Any]]] = {h: {} for h in range(start, end, HOUR_MS)}
            for k, (_, states) in found.items():
                by_hour[k[0] - k[0] % HOUR_MS][(key_value(_utc(k[0])), *k[1:])] = states
            self._hours.update(by_hour)
        return self._hours[hour_ms]


class _Evidence:
    """What the judges of sketches read beyond the two tables: the correction's own sketches
    (their estimates) and, for quantiles, the window's exact values."""

    def __init__(
        self,
        view: View,
        hour_ms: int,
        corrected: dict[tuple, dict[str, Any]],
        archive: HourArchive,
        following: HourArchive | None,
        states: CorrectedStates,
    ) -> None:
        self.view, self.hour_ms = view, hour_ms
        self.corrected = corrected
        self.archive, self.following = archive, following
        self._states = states
        self._values: dict[int, dict[tuple, list[float]]] = {}

    def states(self) -> dict[tuple, list[Any]]:
        return self._states.of_hour(self.hour_ms)

    def estimates(self, index: int, column: str) -> dict[tuple, Any]:
        agg = self.view.aggregators[index]
        out = {}
        for key, states in self.states().items():
            if states[index] is not None:
                out[key] = agg.result(states[index])[column]
        return out

    def rank_error_of(self, agg: Any, column: str) -> Any:
        """How far a row's realtime value is, in rank, from what the exact values say."""
        how = agg.description.reconciled
        if how is Reconciled.SHARE_RANK:
            return lambda _key, expected, actual: (
                None if expected is None or actual is None else abs(actual - expected)
            )
        if how is Reconciled.BIN_RANK:
            names = [f.name for f in agg.output_fields()]

            def histogram(key: tuple, expected: Any, actual: Any) -> float | None:
                row = self.corrected.get(key, {})
                n = sum(row.get(name) or 0 for name in names)
                return abs(actual - expected) / n if n else None

            return histogram
        values = self._values.get(id(agg))
        if values is None:  # one query per aggregation, not one per quantile column
            values = self._values[id(agg)] = window_values(
                self.archive, self.view, agg, self.following
            )
        q = agg.quantile_of(column)

        def quantile(key: tuple, _expected: Any, actual: Any) -> float | None:
            data = values.get(key)
            if not data or actual is None:
                return None
            below = bisect.bisect_left(data, actual) / len(data)
            at_or_below = bisect.bisect_right(data, actual) / len(data)
            return max(0.0, below - q, q - at_or_below)

        return quantile


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _has_correction(tables: Tables, view: View, hour_ms: int) -> bool:
    segment = view.segment_start(hour_ms)
    return segment in corrected_segments(tables, view, [segment])


def reconcile_hour(
    store: ObjectStore,
    view: View,
    hour_ms: int,
    tolerance: Tolerance | None = None,
    archive: HourArchive | None = None,
    following: HourArchive | None = None,
    *,
    has_correction: bool | None = None,
    on_tables: TablesRead | None = None,
    corrected: pa.Table | None = None,
    states: CorrectedStates | None = None,
    tables: Tables,
) -> Reconciliation:
    """Reconcile ``view``'s windows starting in the hour ``hour_ms`` (epoch ms); a sliding
    view's windows also read the next hour's archive (``following``). ``has_correction``:
    whether the hour's segment has a correction, and ``corrected`` its rows
    (:func:`quality.reconcile.reads.corrected_by_hour`) and ``states`` its sketches, if the
    caller read them."""
    tolerance = tolerance or Tolerance.from_env()
    columns, id_col = archive_columns([view]), id_column([view])
    if archive is None:
        archive = read_hour_archive(store, view.topic, hour_ms, columns, id_col=id_col)
    if view.is_sliding and following is None:
        following = read_hour_archive(store, view.topic, hour_ms + HOUR_MS, columns, id_col=id_col)
    total, causes = view_causes(archive, view, following)
    if has_correction is None:
        has_correction = _has_correction(tables, view, hour_ms)
    if not has_correction:
        return Reconciliation(view.name, hour_ms, False, None, total)
    end = hour_ms + HOUR_MS
    if corrected is None:
        corrected = query_view(store, view, hour_ms, end, prefer="batch", tables=tables)
    realtime = query_view(store, view, hour_ms, end, prefer="realtime", tables=tables)
    if on_tables is not None:
        on_tables(view, hour_ms, corrected, realtime)
    keys = view_keys(view)
    comparison = compare_tables(corrected, realtime, keys, metric_kinds(view), tolerance)
    want, got = rows_by_key(corrected, keys), rows_by_key(realtime, keys)
    matched = [k for k in want if k in got]
    pairs = {
        column: [(k, want[k].get(column), got[k].get(column)) for k in matched]
        for column in view.metric_columns
    }
    states = states or CorrectedStates(store, tables, view, [hour_ms])
    checks = _Evidence(view, hour_ms, want, archive, following, states)
    metrics = _metrics(view, comparison, pairs, causes, tolerance, checks)
    missing_explained = sum(
        1
        for k in comparison.missing
        if (why := causes.get(k, NO_CAUSES)).deliveries and why.late == why.deliveries
    )
    unexplained_groups = len(comparison.missing) - missing_explained + len(comparison.extra)
    failures = []
    label = f"{view.name} {hour_label(hour_ms)}"
    allowed_groups = allowed_unexplained(
        tolerance.unexplained_share, max(1, comparison.expected_rows)
    )
    if unexplained_groups > allowed_groups:
        failures.append(
            f"{label}: {unexplained_groups} group(s) differ without late events to explain them "
            f"({len(comparison.missing) - missing_explained} missing from realtime, "
            f"{len(comparison.extra)} only in realtime; e.g. "
            f"{[list(map(str, k)) for k in (comparison.missing + comparison.extra)[:3]]})"
        )
    for metric in metrics:
        if metric.passed:
            continue
        detail = f"{metric.unexplained} of {metric.compared} rows break '{metric.rule}'"
        if metric.samples:
            first = metric.samples[0]
            detail += (
                f" (e.g. {' '.join(first['key'])}: realtime {first['realtime']}, exact "
                f"{first['exact']}, {first['duplicates']} duplicate(s), {first['late']} late)"
            )
        elif metric.unexplained == 0:
            detail = f"breaks '{metric.rule}'"
        failures.append(f"{label}: {metric.column}: {detail}")
    return Reconciliation(
        view=view.name,
        hour_ms=hour_ms,
        corrected=True,
        comparison=comparison,
        causes=total,
        metrics=metrics,
        groups_missing_explained=missing_explained,
        groups_unexplained=unexplained_groups,
        failures=failures,
    )
