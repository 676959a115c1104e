"""Reconcile a windowed view's realtime values with its correction, hour by hour, and say why they differ.

For each view and hour with a published correction: realtime vs corrected per window, group
and metric (:func:`quality.compare.compare_tables`), and the causes counted from the archive
(:mod:`quality.causes`). Then each difference is either explained or not:

- ``count``: realtime must equal exact + duplicate deliveries - late drops of its window and
  group, exactly. Anything else is unexplained (lost or double-counted data).
- other exact aggregations (sum, min, max, mean, count_distinct, first, last): a row may differ
  only if its window and group had duplicate or late events.
- ``approx_count_distinct`` (HLL): within ``hll_sigmas`` relative standard errors of the exact
  count (late drops excuse a lower value); at most ``hll_outside_share`` of the rows (and at
  least one) may fall outside, as a k-sigma band allows.
- ``quantiles`` (KLL): mean relative error within ``approximate_relative`` over the rows whose
  window and group had no duplicates or late drops (one such value moves a small window's
  quantile).
- ``top_k``: reported, never failing.
- groups the stream lacks are explained when every event of the group came late; groups only
  the stream has are never explained.

An exact metric (or the groups) fails when unexplained rows exceed ``unexplained_share`` of the
rows compared (0 by default: every difference must have a cause). No Dagster imports; the
blocking asset checks and the report use it.

Session views are reconciled by :mod:`quality.reconcile.sessions` (sessions missing, extra,
and per metric, with the duplicates and late drops of each session's span as causes).
"""

from __future__ import annotations

from typing import Any

from pipelines.segments import HOUR_MS, hour_label
from pipelines.serving import corrected_segments, query_view
from pipelines.storage import ObjectStore
from pipelines.views.model import View
from quality.causes import GroupCauses, HourArchive, read_hour_archive, view_causes
from quality.compare import (
    EXACT,
    Comparison,
    Tolerance,
    compare_tables,
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
    hll_metric,
    other_metric,
    quantile_metric,
)
from quality.reconcile.results import MetricReconciliation, Reconciliation

__all__ = ["reconcile_hour"]


def _lookup(causes: dict[tuple, GroupCauses]) -> CausesOf:
    return lambda key: causes.get(key, NO_CAUSES)


def _count_judge(_key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
    if expected is None or actual is None:
        return close(expected, actual) or why.explains_difference
    return int(actual) - int(expected) == why.stream_count_offset


def _exact_judge(_key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
    return close(expected, actual) or why.explains_difference


def _exact_metric(
    column: str, aggregation: str, pairs: Pairs, causes_of: CausesOf, tolerance: Tolerance
) -> MetricReconciliation:
    if aggregation == "count":
        judge, rule = _count_judge, "realtime = exact + duplicates - late drops"
    else:
        judge, rule = _exact_judge, "differences only where duplicates or late drops occurred"
    return exact_metric(column, EXACT, aggregation, pairs, causes_of, judge, rule, tolerance)


def _metrics(
    view: View,
    comparison: Comparison,
    pairs_by_column: dict[str, Pairs],
    causes: dict[tuple, GroupCauses],
    tolerance: Tolerance,
) -> list[MetricReconciliation]:
    kinds = metric_kinds(view)
    causes_of = _lookup(causes)
    result = []
    for agg in view.aggregators:
        for out in agg.output_fields():
            column, kind = out.name, kinds[out.name]
            pairs = pairs_by_column[column]
            if kind == EXACT:
                result.append(_exact_metric(column, agg.name, pairs, causes_of, tolerance))
            elif agg.name == "approx_count_distinct":
                rse = agg.relative_standard_error()  # type: ignore[attr-defined]
                result.append(hll_metric(column, rse, pairs, causes_of, tolerance))
            elif agg.name == "quantiles":
                result.append(quantile_metric(column, pairs, causes_of, tolerance))
            else:
                result.append(other_metric(column, kind, agg.name, comparison))
    return result


def _has_correction(store: ObjectStore, view: View, hour_ms: int) -> bool:
    segment = view.segment_start(hour_ms)
    return segment in corrected_segments(store, view, [segment])


def reconcile_hour(
    store: ObjectStore,
    view: View,
    hour_ms: int,
    tolerance: Tolerance | None = None,
    archive: HourArchive | None = None,
) -> Reconciliation:
    """Reconcile ``view``'s windows starting in the hour ``hour_ms`` (epoch ms)."""
    tolerance = tolerance or Tolerance.from_env()
    if archive is None:
        archive = read_hour_archive(store, view.topic, hour_ms, view.grouping_cols)
    total, causes = view_causes(archive, view)
    if not _has_correction(store, view, hour_ms):
        return Reconciliation(view.name, hour_ms, False, None, total)
    end = hour_ms + HOUR_MS
    corrected = query_view(store, view, hour_ms, end, prefer="batch")
    realtime = query_view(store, view, hour_ms, end, prefer="realtime")
    keys = view_keys(view)
    comparison = compare_tables(corrected, realtime, keys, metric_kinds(view), tolerance)
    want, got = rows_by_key(corrected, keys), rows_by_key(realtime, keys)
    matched = [k for k in want if k in got]
    pairs = {
        column: [(k, want[k].get(column), got[k].get(column)) for k in matched]
        for column in view.metric_columns
    }
    metrics = _metrics(view, comparison, pairs, causes, tolerance)
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
