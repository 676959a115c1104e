"""Reconcile a view's realtime values with its correction, hour by hour, and say why they differ.

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

Session views are reconciled by :mod:`quality.sessions` (sessions missing, extra, and per
metric, with the duplicates and late drops of each session's span as causes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.segments import HOUR_MS, hour_label, read_range_records
from pipelines.serving.query import query_view, read_published
from pipelines.storage import ObjectStore
from pipelines.views.model import View
from quality.causes import (
    ArchiveReader,
    Causes,
    GroupCauses,
    HourArchive,
    read_hour_archive,
    view_causes,
)
from quality.compare import (
    APPROXIMATE,
    EXACT,
    Comparison,
    Tolerance,
    compare_tables,
    metric_kinds,
    rows_by_key,
    view_keys,
)

__all__ = ["MetricReconciliation", "Reconciliation", "reconcile", "reconcile_hour"]


NO_CAUSES = GroupCauses(0, 0, 0)
SAMPLES = 5


@dataclass(frozen=True)
class MetricReconciliation:
    """How one metric's differences split into explained and unexplained rows."""

    column: str
    kind: str
    aggregation: str
    compared: int
    differing: int = 0
    explained: int = 0
    unexplained: int = 0
    allowed: int = 0
    """Unexplained (or beyond-sigma) rows the tolerance allows."""
    rule: str = ""
    passed: bool = True
    samples: list[dict[str, Any]] = field(default_factory=list)
    """A few unexplained rows: key, realtime, exact, and the window's causes."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "kind": self.kind,
            "aggregation": self.aggregation,
            "compared": self.compared,
            "differing": self.differing,
            "explained": self.explained,
            "unexplained": self.unexplained,
            "allowed": self.allowed,
            "rule": self.rule,
            "passed": self.passed,
            "samples": self.samples,
        }


@dataclass(frozen=True)
class Reconciliation:
    """One view and hour: the comparison, its causes, and whether the causes explain it."""

    view: str
    hour_ms: int
    corrected: bool
    """False when the hour has no published correction: nothing was compared."""
    comparison: Comparison | None
    causes: Causes
    metrics: list[MetricReconciliation] = field(default_factory=list)
    groups_missing_explained: int = 0
    groups_unexplained: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def label(self) -> str:
        return hour_label(self.hour_ms)

    def summary(self) -> dict[str, Any]:
        """Plain JSON-able values for reports and check metadata."""
        return {
            "view": self.view,
            "hour": self.label,
            "corrected": self.corrected,
            "passed": self.passed,
            "failures": self.failures,
            "causes": self.causes.as_dict(),
            "groups_missing_explained": self.groups_missing_explained,
            "groups_unexplained": self.groups_unexplained,
            "comparison": self.comparison.summary() if self.comparison else None,
            "metrics": [m.as_dict() for m in self.metrics],
        }


def _close(expected: Any, actual: Any) -> bool:
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return abs(float(actual) - float(expected)) <= 1e-9 * max(1.0, abs(float(expected)))
    return expected == actual


def _sample(key: tuple, expected: Any, actual: Any, causes: GroupCauses) -> dict[str, Any]:
    return {
        "key": [str(k) for k in key],
        "exact": expected,
        "realtime": actual,
        "deliveries": causes.deliveries,
        "duplicates": causes.duplicates,
        "late": causes.late,
    }


def _allowed(share: float, rows: int) -> int:
    return math.floor(share * rows + 1e-9)


Pairs = list[tuple[tuple, Any, Any]]
"""Matched rows of one metric: (key, exact value, realtime value)."""
Judge = Callable[[Any, Any, GroupCauses], bool]
"""Whether a row's realtime value is what its exact value and causes lead to expect."""


def _tally(
    pairs: Pairs, causes: dict[tuple, GroupCauses], judge: Judge
) -> tuple[int, int, list[dict[str, Any]]]:
    """(rows that differ, of those the explained ones, samples of the unexplained rows)."""
    differing = explained = 0
    unexplained: list[dict[str, Any]] = []
    for key, expected, actual in pairs:
        why = causes.get(key, NO_CAUSES)
        differs = not _close(expected, actual)
        ok = judge(expected, actual, why)
        differing += differs
        explained += differs and ok
        if not ok:
            unexplained.append(_sample(key, expected, actual, why))
    return differing, explained, unexplained


def _relative(expected: Any, actual: Any, floor: float = 1e-12) -> float:
    if expected is None or actual is None:
        return 1.0
    return abs(float(actual) - float(expected)) / max(abs(float(expected)), floor)


def _count_judge(expected: Any, actual: Any, why: GroupCauses) -> bool:
    if expected is None or actual is None:
        return _close(expected, actual) or why.explains_difference
    return int(actual) - int(expected) == why.stream_count_offset


def _exact_judge(expected: Any, actual: Any, why: GroupCauses) -> bool:
    return _close(expected, actual) or why.explains_difference


def _exact_metric(
    column: str,
    aggregation: str,
    pairs: Pairs,
    causes: dict[tuple, GroupCauses],
    tolerance: Tolerance,
) -> MetricReconciliation:
    count = aggregation == "count"
    differing, explained, unexplained = _tally(
        pairs, causes, _count_judge if count else _exact_judge
    )
    allowed = _allowed(tolerance.unexplained_share, len(pairs))
    return MetricReconciliation(
        column=column,
        kind=EXACT,
        aggregation=aggregation,
        compared=len(pairs),
        differing=differing,
        explained=explained,
        unexplained=len(unexplained),
        allowed=allowed,
        rule="realtime = exact + duplicates - late drops"
        if count
        else "differences only where duplicates or late drops occurred",
        passed=len(unexplained) <= allowed,
        samples=unexplained[:SAMPLES],
    )


def _hll_metric(
    column: str, rse: float, pairs: Pairs, causes: dict[tuple, GroupCauses], tolerance: Tolerance
) -> MetricReconciliation:
    band = tolerance.hll_sigmas * rse

    def judge(expected: Any, actual: Any, why: GroupCauses) -> bool:
        if _close(expected, actual):
            return True
        if expected is None or actual is None:
            return False
        return _relative(expected, actual, floor=1.0) <= band or (
            why.late > 0 and actual < expected
        )

    differing, explained, beyond = _tally(pairs, causes, judge)
    allowed = max(1, math.ceil(tolerance.hll_outside_share * len(pairs)))
    return MetricReconciliation(
        column=column,
        kind=APPROXIMATE,
        aggregation="approx_count_distinct",
        compared=len(pairs),
        differing=differing,
        explained=explained,
        unexplained=len(beyond),
        allowed=allowed,
        rule=f"within {tolerance.hll_sigmas:g} x RSE {rse:.2%} of the exact count",
        passed=len(beyond) <= allowed,
        samples=beyond[:SAMPLES],
    )


def _quantile_metric(
    column: str, pairs: Pairs, causes: dict[tuple, GroupCauses], tolerance: Tolerance
) -> MetricReconciliation:
    """KLL: the mean relative error of rows without duplicates or late drops is bounded;
    in small windows one late or duplicate value moves a quantile, so those are explained."""
    bound = tolerance.approximate_relative

    def judge(expected: Any, actual: Any, why: GroupCauses) -> bool:
        return (
            _close(expected, actual)
            or why.explains_difference
            or _relative(expected, actual) <= bound
        )

    differing, explained, beyond = _tally(pairs, causes, judge)
    errors = [
        0.0 if _close(e, a) else _relative(e, a)
        for key, e, a in pairs
        if not causes.get(key, NO_CAUSES).explains_difference
    ]
    mean = sum(errors) / len(errors) if errors else 0.0
    return MetricReconciliation(
        column=column,
        kind=APPROXIMATE,
        aggregation="quantiles",
        compared=len(pairs),
        differing=differing,
        explained=explained,
        unexplained=len(beyond),
        allowed=len(beyond) if mean <= bound else 0,
        rule=f"mean relative error of rows without duplicates or late drops <= {bound:.0%}"
        f" (was {mean:.1%})",
        passed=mean <= bound,
        samples=beyond[:SAMPLES],
    )


def _other_metric(
    column: str, kind: str, aggregation: str, comparison: Comparison
) -> MetricReconciliation:
    error = next(m for m in comparison.metrics if m.column == column)
    rule = (
        f"mean relative error <= {error.bound:.0%}" if error.bound is not None else "reported only"
    )
    return MetricReconciliation(
        column=column,
        kind=kind,
        aggregation=aggregation,
        compared=error.compared,
        differing=error.mismatched,
        rule=rule,
        passed=error.passed,
    )


def _metrics(
    view: View,
    comparison: Comparison,
    pairs_by_column: dict[str, Pairs],
    causes: dict[tuple, GroupCauses],
    tolerance: Tolerance,
) -> list[MetricReconciliation]:
    kinds = metric_kinds(view)
    result = []
    for agg in view.aggregators:
        for out in agg.output_fields():
            column, kind = out.name, kinds[out.name]
            if kind == EXACT:
                result.append(
                    _exact_metric(column, agg.name, pairs_by_column[column], causes, tolerance)
                )
            elif agg.name == "approx_count_distinct":
                rse = agg.relative_standard_error()  # type: ignore[attr-defined]
                result.append(_hll_metric(column, rse, pairs_by_column[column], causes, tolerance))
            elif agg.name == "quantiles":
                result.append(_quantile_metric(column, pairs_by_column[column], causes, tolerance))
            else:
                result.append(_other_metric(column, kind, agg.name, comparison))
    return result


def _has_correction(store: ObjectStore, view: View, hour_ms: int) -> bool:
    return read_published(store, view.name, view.segment_start(hour_ms)) is not None


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
    allowed_groups = _allowed(tolerance.unexplained_share, max(1, comparison.expected_rows))
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


def reconcile(
    store: ObjectStore,
    views: Sequence[View],
    hours: Sequence[int],
    tolerance: Tolerance | None = None,
    on_result: Callable[[Reconciliation], None] | None = None,
) -> list[Reconciliation]:
    """Reconcile every enabled view for every hour; the archive is read once per topic-hour."""
    tolerance = tolerance or Tolerance.from_env()
    enabled = [v for v in views if not v.disabled]
    results = []
    by_topic: dict[str, list[View]] = {}
    for view in enabled:
        by_topic.setdefault(view.topic, []).append(view)
    ranges = {topic: read_range_records(store, topic) for topic in by_topic}
    reader = ArchiveReader(store)
    for hour in hours:
        for topic, topic_views in by_topic.items():
            grouping = sorted({c for v in topic_views for c in v.grouping_cols})
            archive = read_hour_archive(reader, topic, hour, grouping, ranges[topic])
            for view in topic_views:
                if view.is_session:
                    # Imported here: the session reconciliation builds on this module.
                    from quality.sessions import reconcile_session_hour

                    result = reconcile_session_hour(
                        store, view, hour, tolerance, reader, ranges[topic]
                    )
                else:
                    result = reconcile_hour(store, view, hour, tolerance, archive)
                results.append(result)
                if on_result is not None:
                    on_result(result)
    results.sort(key=lambda r: ([v.name for v in enabled].index(r.view), r.hour_ms))
    return results
