"""Compare a view's realtime values with its corrected (batch) values: how wrong was the stream?

Pure functions over two pyarrow tables as :func:`pipelines.serving.query_view` returns them
(window_start, window_end, group columns, metric columns, source). The corrected table is
the reference. Rows are matched on (window_start, group columns); per metric the absolute
and relative errors are summarised (max and mean) and held against a tolerance that depends
on how the stream computes the metric: exact aggregations (count, sum, min, ...) must agree
within ``Tolerance.relative``; sketches (HLL, KLL) within ``Tolerance.approximate_relative``;
rankings (top_k) are reported but never fail the comparison. No Dagster imports here: the
asset checks in :mod:`assets.views.checks` wrap these results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.aggregators import Reconciled
from pipelines.exceptions import ConfigError
from pipelines.views.model import View
from quality.config import CheckSettings

__all__ = [
    "APPROXIMATE",
    "EXACT",
    "INFORMATIONAL",
    "Comparison",
    "MetricError",
    "RowMatch",
    "Tolerance",
    "column_values",
    "compare_tables",
    "key_value",
    "match_rows",
    "metric_kinds",
    "nulls_first",
    "row_keys",
    "rows_by_key",
    "view_keys",
]


EXACT = "exact"
APPROXIMATE = "approximate"
INFORMATIONAL = "informational"


@dataclass(frozen=True)
class Tolerance:
    """How far realtime may be from corrected and still pass."""

    relative: float = 0.05
    """Bound on the relative error of exact aggregations."""
    approximate_relative: float = 0.10
    """Bound for sketch-based aggregations (HLL distinct counts, KLL quantiles)."""
    statistic: str = "mean"
    """Which per-metric relative error is held against the bound: ``mean`` or ``max``."""
    max_group_mismatch: float = 0.05
    """Bound on (missing + extra groups) / corrected groups."""
    unexplained_share: float = 0.0
    """Reconciliation: share of an exact metric's rows (or of the groups) that may differ
    without late or duplicate events in their window to explain it."""
    hll_sigmas: float = 3.0
    """Reconciliation: an HLL distinct count is off when it is beyond this many RSEs."""
    hll_outside_share: float = 0.01
    """Reconciliation: share of HLL rows that may be beyond ``hll_sigmas`` (plus one row)."""

    def __post_init__(self) -> None:
        if self.statistic not in ("mean", "max"):
            raise ConfigError(f"tolerance statistic must be mean or max, got {self.statistic!r}")
        for name in (
            "relative",
            "approximate_relative",
            "max_group_mismatch",
            "unexplained_share",
            "hll_sigmas",
            "hll_outside_share",
        ):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ConfigError(f"tolerance {name} must be a finite number >= 0, got {value!r}")

    @classmethod
    def from_env(cls) -> Tolerance:
        """The tolerance of the ``SLUICE_CHECK_*`` settings (:class:`quality.config.CheckSettings`)."""
        return cls.from_settings(CheckSettings.from_env())

    @classmethod
    def from_settings(cls, settings: CheckSettings) -> Tolerance:
        return cls(
            relative=settings.relative_tolerance,
            approximate_relative=settings.approximate_tolerance,
            statistic=settings.statistic,
            max_group_mismatch=settings.group_mismatch,
            unexplained_share=settings.unexplained_share,
            hll_sigmas=settings.hll_sigmas,
            hll_outside_share=settings.hll_outside_share,
        )

    def bound(self, kind: str) -> float | None:
        if kind == EXACT:
            return self.relative
        if kind == APPROXIMATE:
            return self.approximate_relative
        return None


@dataclass(frozen=True)
class MetricError:
    """Errors of one metric column over the matched rows."""

    column: str
    kind: str
    compared: int
    abs_max: float | None = None
    abs_mean: float | None = None
    rel_max: float | None = None
    rel_mean: float | None = None
    mismatched: int = 0
    """Rows whose values differ (any difference; for strings the only measure)."""
    bound: float | None = None
    passed: bool = True
    rel_errors: tuple[float, ...] = field(default=(), repr=False)
    """Per matched row, the relative error (for error distributions in reports)."""


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing realtime (actual) with corrected (expected) values."""

    expected_rows: int
    actual_rows: int
    matched: int
    missing: list[tuple] = field(default_factory=list)
    """Keys the correction has but realtime lacks."""
    extra: list[tuple] = field(default_factory=list)
    """Keys realtime has but the correction lacks."""
    metrics: list[MetricError] = field(default_factory=list)
    tolerance: Tolerance = field(default_factory=Tolerance)

    @property
    def group_mismatch(self) -> float:
        if self.expected_rows == 0:
            return 0.0 if self.actual_rows == 0 else 1.0
        return (len(self.missing) + len(self.extra)) / self.expected_rows

    @property
    def failures(self) -> list[str]:
        """Why the comparison fails; empty when it passes."""
        reasons = []
        if self.group_mismatch > self.tolerance.max_group_mismatch:
            reasons.append(
                f"{len(self.missing)} missing and {len(self.extra)} extra groups "
                f"({self.group_mismatch:.1%} > {self.tolerance.max_group_mismatch:.1%})"
            )
        for metric in self.metrics:
            if not metric.passed:
                reasons.append(
                    f"{metric.column}: {self.tolerance.statistic} relative error "
                    f"{_statistic(metric, self.tolerance.statistic):.2%} > {metric.bound:.2%}"
                )
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> dict[str, Any]:
        """Plain JSON-able values (what a report or an asset check records)."""
        return {
            "passed": self.passed,
            "expected_rows": self.expected_rows,
            "actual_rows": self.actual_rows,
            "matched": self.matched,
            "groups_missing": len(self.missing),
            "groups_extra": len(self.extra),
            "group_mismatch": self.group_mismatch,
            "failures": self.failures,
            "metrics": {
                m.column: {
                    "kind": m.kind,
                    "compared": m.compared,
                    "abs_max": m.abs_max,
                    "abs_mean": m.abs_mean,
                    "rel_max": m.rel_max,
                    "rel_mean": m.rel_mean,
                    "mismatched": m.mismatched,
                    "bound": m.bound,
                    "passed": m.passed,
                }
                for m in self.metrics
            },
        }


def metric_kinds(view: View) -> dict[str, str]:
    """Per output column of ``view``: exact, approximate (sketch) or informational (ranking),
    as each aggregation's description says it is reconciled."""
    return {
        out.name: _kind(agg.description.reconciled)
        for agg in view.aggregators
        for out in agg.output_fields()
    }


def _kind(how: Reconciled) -> str:
    if how.exact:
        return EXACT
    return INFORMATIONAL if how.informational else APPROXIMATE


def _statistic(metric: MetricError, statistic: str) -> float:
    value = metric.rel_mean if statistic == "mean" else metric.rel_max
    return 0.0 if value is None else value


def key_value(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def rows_by_key(table: pa.Table, keys: Sequence[str]) -> dict[tuple, dict[str, Any]]:
    """Rows of ``table`` by their key tuple; timestamps become ISO strings."""
    rows: dict[tuple, dict[str, Any]] = {}
    for row in table.to_pylist():
        rows[tuple(key_value(row[k]) for k in keys)] = row
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _metric_error(
    column: str, kind: str, pairs: list[tuple[Any, Any]], tolerance: Tolerance
) -> MetricError:
    abs_errors: list[float] = []
    rel_errors: list[float] = []
    mismatched = 0
    for expected, actual in pairs:
        if expected == actual:
            if _is_number(expected):
                abs_errors.append(0.0)
            rel_errors.append(0.0)  # an equal string or null is no error either
            continue
        mismatched += 1
        if _is_number(expected) and _is_number(actual):
            diff = abs(float(actual) - float(expected))
            abs_errors.append(diff)
            rel_errors.append(diff / abs(float(expected)) if expected else 1.0)
        else:  # a null on one side, or differing strings: entirely wrong
            rel_errors.append(1.0)
    return _summary(column, kind, abs_errors, rel_errors, mismatched, tolerance)


def _summary(
    column: str,
    kind: str,
    abs_errors: list[float],
    rel_errors: list[float],
    mismatched: int,
    tolerance: Tolerance,
) -> MetricError:
    """A metric's errors summed up (in Python, in row order: the same floats either way)."""
    bound = tolerance.bound(kind)
    metric = MetricError(
        column=column,
        kind=kind,
        compared=len(rel_errors),
        abs_max=max(abs_errors) if abs_errors else None,
        abs_mean=sum(abs_errors) / len(abs_errors) if abs_errors else None,
        rel_max=max(rel_errors) if rel_errors else None,
        rel_mean=sum(rel_errors) / len(rel_errors) if rel_errors else None,
        mismatched=mismatched,
        bound=bound,
        rel_errors=tuple(rel_errors),
    )
    passed = bound is None or _statistic(metric, tolerance.statistic) <= bound
    return MetricError(**{**metric.__dict__, "passed": passed})


@dataclass(frozen=True)
class RowMatch:
    """Which rows of two tables share a key: positions, not copies of the rows.

    A key that repeats within a table counts once, for its last row (as :func:`rows_by_key`
    keeps it); matched rows are in the expected table's order of first appearance."""

    expected_rows: int
    """Distinct keys of the expected table."""
    actual_rows: int
    expected_index: np.ndarray
    """Position in the expected table of each matched row."""
    actual_index: np.ndarray
    """Position in the actual table of the same row."""
    missing_index: np.ndarray
    """Positions in the expected table of keys the actual table lacks."""
    extra_index: np.ndarray
    """Positions in the actual table of keys the expected table lacks."""

    @property
    def matched(self) -> int:
        return len(self.expected_index)


def _key_columns(
    table: pa.Table, keys: Sequence[str], shared: Sequence[pa.DataType | None]
) -> list:
    """The key tuples of ``table``'s rows: timestamps as integers when both tables type them
    alike (equal instants, equal ISO strings), else as :func:`key_value` makes them."""
    columns = []
    for name, kind in zip(keys, shared, strict=True):
        column = table.column(name)
        if pa.types.is_timestamp(column.type) and column.type == kind:
            columns.append(column.cast(pa.int64()).to_pylist())
        elif pa.types.is_temporal(column.type):
            columns.append([key_value(v) for v in column.to_pylist()])
        else:
            columns.append(column.to_pylist())
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(len(table))]


def _positions(keys: list[tuple]) -> dict[tuple, int]:
    found: dict[tuple, int] = {}
    for position, key in enumerate(keys):
        found[key] = position  # the last row of a repeated key, at its first key's place
    return found


def match_rows(expected: pa.Table, actual: pa.Table, keys: Sequence[str]) -> RowMatch:
    """Match the rows of ``actual`` to those of ``expected`` by their ``keys`` columns."""
    kinds = [
        expected.column(k).type if expected.column(k).type == actual.column(k).type else None
        for k in keys
    ]
    want = _positions(_key_columns(expected, keys, kinds))
    got = _positions(_key_columns(actual, keys, kinds))
    pairs = [(position, got[key]) for key, position in want.items() if key in got]
    index = np.array(pairs, dtype=np.int64).reshape(-1, 2)

    def positions(values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    return RowMatch(
        expected_rows=len(want),
        actual_rows=len(got),
        expected_index=index[:, 0],
        actual_index=index[:, 1],
        missing_index=positions([p for key, p in want.items() if key not in got]),
        extra_index=positions([p for key, p in got.items() if key not in want]),
    )


def nulls_first(key: tuple) -> tuple:
    """A sort key for row keys in which a group value may be null (null first)."""
    return tuple((value is not None, value) for value in key)


def row_keys(table: pa.Table, keys: Sequence[str], positions: np.ndarray) -> list[tuple]:
    """The keys of ``table``'s rows at ``positions``, as :func:`rows_by_key` writes them."""
    picked = table.select(list(keys)).take(pa.array(positions, pa.int64()))
    return [tuple(key_value(row[k]) for k in keys) for row in picked.to_pylist()]


def column_values(table: pa.Table, column: str, positions: np.ndarray) -> pa.Array:
    """``column`` of ``table`` at ``positions``; all null where the table lacks the column."""
    if column not in table.column_names:
        return pa.nulls(len(positions))
    return table.column(column).take(pa.array(positions, pa.int64())).combine_chunks()


def _numeric_pairs(expected: pa.Array, actual: pa.Array) -> tuple[np.ndarray, ...] | None:
    """The two columns as numbers with their validity, when numpy can judge them exactly as
    Python would: both integers or both floats of one type, no NaN."""
    kind = expected.type
    if kind != actual.type or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    valid_e = np.asarray(expected.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    valid_a = np.asarray(actual.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    fill = 0 if pa.types.is_integer(kind) else 0.0
    e = expected.fill_null(fill).to_numpy(zero_copy_only=False)
    a = actual.fill_null(fill).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(kind) and (np.isnan(e).any() or np.isnan(a).any()):
        return None  # Python's max and sum over NaN depend on the order: left to it
    return e, a, valid_e, valid_a


def _column_error(
    column: str, kind: str, expected: pa.Array, actual: pa.Array, tolerance: Tolerance
) -> MetricError:
    """:func:`_metric_error` of two aligned columns, in numpy where that is exact."""
    numeric = _numeric_pairs(expected, actual)
    if numeric is None:
        pairs = list(zip(expected.to_pylist(), actual.to_pylist(), strict=True))
        return _metric_error(column, kind, pairs, tolerance)
    e, a, valid_e, valid_a = numeric
    both = valid_e & valid_a
    equal = (both & (e == a)) | (~valid_e & ~valid_a)
    differ_numbers = both & ~equal
    # differences as Python's float(actual) - float(expected); zero references count fully
    diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
    ref = np.abs(e.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_diff = np.where(e != 0, diff / np.where(ref == 0, 1.0, ref), 1.0)
    rel = np.where(equal, 0.0, np.where(differ_numbers, rel_diff, 1.0))
    abs_errors = np.where(equal[both], 0.0, diff[both]).tolist()
    mismatched = int((~equal).sum())
    return _summary(column, kind, abs_errors, rel.tolist(), mismatched, tolerance)


def compare_tables(
    expected: pa.Table,
    actual: pa.Table,
    keys: Sequence[str],
    metrics: Mapping[str, str],
    tolerance: Tolerance | None = None,
    match: RowMatch | None = None,
) -> Comparison:
    """Compare ``actual`` (realtime) against ``expected`` (corrected).

    ``keys`` identify a row (window start and group columns); ``metrics`` maps each metric
    column to its kind (:func:`metric_kinds`). Rows missing on either side count as group
    mismatches, not as metric errors. ``match``: the tables' :func:`match_rows`, if the caller
    has it. Column by column: numbers in numpy, other values (strings, lists) row by row.
    """
    tolerance = tolerance or Tolerance()
    match = match or match_rows(expected, actual, keys)
    errors = [
        _column_error(
            column,
            kind,
            column_values(expected, column, match.expected_index),
            column_values(actual, column, match.actual_index),
            tolerance,
        )
        for column, kind in metrics.items()
    ]
    return Comparison(
        expected_rows=match.expected_rows,
        actual_rows=match.actual_rows,
        matched=match.matched,
        missing=sorted(row_keys(expected, keys, match.missing_index), key=nulls_first),
        extra=sorted(row_keys(actual, keys, match.extra_index), key=nulls_first),
        metrics=errors,
        tolerance=tolerance,
    )


def view_keys(view: View) -> list[str]:
    """Columns that identify a row of ``view``'s output (for a session view: key and start)."""
    return view.key_columns
