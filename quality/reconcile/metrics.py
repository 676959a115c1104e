"""Per-metric judgement shared by the windowed and the session reconciliation.

A metric's matched rows are tallied once: how many differ, how many of those a cause
explains (the judge says), and samples of the rest; the tolerance then says how many
unexplained rows may remain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from quality.causes import GroupCauses
from quality.compare import APPROXIMATE, Comparison, Tolerance
from quality.reconcile.results import MetricReconciliation

__all__ = [
    "DOUBLE_RELATIVE_TOLERANCE",
    "NO_CAUSES",
    "SAMPLES",
    "CausesOf",
    "Judge",
    "Pairs",
    "allowed_unexplained",
    "close",
    "counted_metric",
    "exact_metric",
    "frequent_items_metric",
    "from_tally",
    "other_metric",
    "rank_metric",
    "relative_error",
    "reproduced_metric",
    "sample",
    "tally",
    "within_tolerance",
]

NO_CAUSES = GroupCauses(0, 0, 0)
SAMPLES = 5
"""Unexplained rows kept per metric as examples."""

Pairs = list[tuple[tuple, Any, Any]]
"""Matched rows of one metric: (key, exact value, realtime value)."""
CausesOf = Callable[[tuple], GroupCauses]
"""The causes counted for a row's key (its window and group, or its session's span)."""
Judge = Callable[[tuple, Any, Any, GroupCauses], bool]
"""Whether a row's realtime value is what its exact value and causes lead to expect."""


DOUBLE_RELATIVE_TOLERANCE = 1e-9
"""How far a double the stream computed may be from the correction's and still be the same
value: relative to the exact value (to 1 below 1 in magnitude). Spark adds a window's doubles
in another order than the stream, so their sums, means and variances differ in the last bits;
integers (counts, a long column's sums, mins and maxes) are compared exactly."""


def close(expected: Any, actual: Any) -> bool:
    """Equal: integers exactly, doubles within :data:`DOUBLE_RELATIVE_TOLERANCE`."""
    if type(expected) is int and type(actual) is int:
        return expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return bool(within_tolerance(float(expected), float(actual)))
    return expected == actual


def within_tolerance(expected: Any, actual: Any) -> Any:
    """Whether ``actual`` is ``expected`` within :data:`DOUBLE_RELATIVE_TOLERANCE` (numbers
    or numpy arrays of them, elementwise)."""
    return abs(actual - expected) <= DOUBLE_RELATIVE_TOLERANCE * np.maximum(1.0, abs(expected))


def allowed_unexplained(share: float, rows: int) -> int:
    """Unexplained rows a tolerance of ``share`` allows among ``rows``."""
    return math.floor(share * rows + 1e-9)


def relative_error(expected: Any, actual: Any, floor: float = 1e-12) -> float:
    if expected is None or actual is None:
        return 1.0
    return abs(float(actual) - float(expected)) / max(abs(float(expected)), floor)


def sample(key: tuple, expected: Any, actual: Any, causes: GroupCauses) -> dict[str, Any]:
    return {
        "key": [str(k) for k in key],
        "exact": expected,
        "realtime": actual,
        "deliveries": causes.deliveries,
        "duplicates": causes.duplicates,
        "late": causes.late,
    }


def tally(pairs: Pairs, causes_of: CausesOf, judge: Judge) -> tuple[int, int, list[dict[str, Any]]]:
    """(rows that differ, of those the explained ones, samples of the unexplained rows)."""
    differing = explained = 0
    unexplained: list[dict[str, Any]] = []
    for key, expected, actual in pairs:
        why = causes_of(key)
        differs = not close(expected, actual)
        ok = judge(key, expected, actual, why)
        differing += differs
        explained += differs and ok
        if not ok:
            unexplained.append(sample(key, expected, actual, why))
    return differing, explained, unexplained


def from_tally(
    column: str,
    kind: str,
    aggregation: str,
    pairs: Pairs,
    counts: tuple[int, int, list[dict[str, Any]]],
    allowed: int,
    rule: str,
) -> MetricReconciliation:
    """A metric whose rows were judged one by one (``counts`` from :func:`tally`): it passes
    while no more rows than ``allowed`` are beyond its rule."""
    differing, explained, beyond = counts
    return MetricReconciliation(
        column=column,
        kind=kind,
        aggregation=aggregation,
        compared=len(pairs),
        differing=differing,
        explained=explained,
        unexplained=len(beyond),
        allowed=allowed,
        rule=rule,
        passed=len(beyond) <= allowed,
        samples=beyond[:SAMPLES],
    )


def counted_metric(
    column: str,
    kind: str,
    aggregation: str,
    *,
    compared: int,
    differing: int,
    unexplained: int,
    samples: list[dict[str, Any]],
    allowed: int,
    rule: str,
) -> MetricReconciliation:
    """An exact metric whose rows the caller counted: of ``compared`` rows, ``differing``
    differ and ``unexplained`` of those have no cause; it passes while no more than
    ``allowed`` have none (the rows that agree need no judge)."""
    return MetricReconciliation(
        column=column,
        kind=kind,
        aggregation=aggregation,
        compared=compared,
        differing=differing,
        explained=differing - unexplained,
        unexplained=unexplained,
        allowed=allowed,
        rule=rule,
        passed=unexplained <= allowed,
        samples=samples[:SAMPLES],
    )


def exact_metric(
    column: str,
    kind: str,
    aggregation: str,
    pairs: Pairs,
    causes_of: CausesOf,
    judge: Judge,
    rule: str,
    tolerance: Tolerance,
) -> MetricReconciliation:
    """An exact metric: every difference needs a cause (up to ``unexplained_share``)."""
    allowed = allowed_unexplained(tolerance.unexplained_share, len(pairs))
    counts = tally(pairs, causes_of, judge)
    return from_tally(column, kind, aggregation, pairs, counts, allowed, rule)


def other_metric(
    column: str, kind: str, aggregation: str, comparison: Comparison
) -> MetricReconciliation:
    """A metric judged by its comparison alone (a bound on the mean error, or reported)."""
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


def reproduced_metric(
    column: str,
    aggregation: str,
    rse: float,
    pairs: Pairs,
    causes_of: CausesOf,
    tolerance: Tolerance,
    reproduced: dict[tuple, Any],
) -> MetricReconciliation:
    """HLL and theta: the correction keeps Spark's own sketch of the window (the same
    DataSketches family and parameters), whose estimate is the stream's exactly when the same
    events went in; duplicates change no distinct count, so every row without a late drop
    must match it. Rows with late drops are held to ``hll_sigmas`` RSEs of the exact count."""
    band = tolerance.hll_sigmas * rse
    matched = [0]

    def judge(key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
        sketch = reproduced.get(key)
        if why.late == 0 and sketch is not None:
            matched[0] += actual == sketch
            return actual == sketch
        if close(expected, actual):
            return True
        if expected is None or actual is None:
            return False
        return relative_error(expected, actual, floor=1.0) <= band or actual < expected

    counts = tally(pairs, causes_of, judge)
    rule = (
        f"equal to Spark's sketch estimate where no event was late ({matched[0]} of "
        f"{len(pairs)} rows reproduced exactly); else within {tolerance.hll_sigmas:g} x RSE "
        f"{rse:.2%} of the exact count"
    )
    return from_tally(column, APPROXIMATE, aggregation, pairs, counts, 0, rule)


def rank_metric(
    column: str,
    aggregation: str,
    epsilon: float,
    pairs: Pairs,
    causes_of: CausesOf,
    tolerance: Tolerance,
    error_of: Callable[[tuple, Any, Any], float | None],
) -> MetricReconciliation:
    """KLL (quantiles, cdf, histogram): its guarantee is on rank, so each row's rank error
    (``error_of``: for a quantile, how far q is from the realtime value's rank among the
    window's exact values; for a CDF, the difference of shares; for a histogram bin, of
    counts over the window's size) must be within the sketch's normalized rank error
    ``epsilon`` (99% confidence: ``hll_outside_share`` of the rows, and one, may exceed it).
    Rows with duplicates or late drops are explained (their values differ)."""

    def judge(key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
        if close(expected, actual) or why.explains_difference:
            return True
        error = error_of(key, expected, actual)
        return error is not None and error <= epsilon

    allowed = max(1, math.ceil(tolerance.hll_outside_share * len(pairs)))
    rule = (
        f"rank error within KLL's normalized rank error {epsilon:.2%} "
        "(rows without duplicates or late drops)"
    )
    counts = tally(pairs, causes_of, judge)
    return from_tally(column, APPROXIMATE, aggregation, pairs, counts, allowed, rule)


def frequent_items_metric(
    column: str, pairs: Pairs, causes_of: CausesOf, tolerance: Tolerance
) -> MetricReconciliation:
    """Frequent items: every item both lists hold has its exact count (the correction's)
    within the realtime [lower, upper] bounds, in rows without duplicates or late drops."""

    def judge(_key: tuple, expected: Any, actual: Any, why: GroupCauses) -> bool:
        if close(expected, actual) or why.explains_difference:
            return True
        if expected is None or actual is None:
            return False
        exact = {e["item"]: e["estimate"] for e in orjson.loads(expected)}
        return all(
            r["lower"] <= exact[r["item"]] <= r["upper"]
            for r in orjson.loads(actual)
            if r["item"] in exact
        )

    rule = "exact counts within the realtime [lower, upper] of every item both list"
    counts = tally(pairs, causes_of, judge)
    return from_tally(column, APPROXIMATE, "frequent_items", pairs, counts, 0, rule)
