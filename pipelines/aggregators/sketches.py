"""Sketch aggregations beyond the built-ins: distinct counts with bounds (HLL, theta), KLL's
CDF and histogram over split points, frequent items with their error bounds.

The stream keeps a DataSketches sketch; the correction computes the exact answer the sketch
estimates (distinct count, share or count of values per split point, item counts), which the
reconciliation then holds the stream's estimate to within the sketch's bound.
"""

from __future__ import annotations

import itertools
from typing import Any

import datasketches as ds
import orjson
import pyarrow as pa

from pipelines.aggregators.base import Aggregator, InputKind, spark_functions, split_label
from pipelines.aggregators.builtin import ApproxCountDistinct, Quantiles, TopK
from pipelines.aggregators.description import Description, Measure, Range, Reconciled
from pipelines.aggregators.registry import register

__all__ = [
    "Cdf",
    "FrequentItems",
    "Histogram",
    "HllBounds",
    "ThetaBounds",
    "ThetaDistinct",
    "theta_set_operation",
]


def _bounded_result(out: str, sketch: Any, std_devs: int) -> dict[str, Any]:
    """An estimate with its bounds at ``std_devs``: HLL and theta sketches answer alike."""
    return {
        out: round(sketch.get_estimate()),
        f"{out}_lower": round(sketch.get_lower_bound(std_devs)),
        f"{out}_upper": round(sketch.get_upper_bound(std_devs)),
    }


def _bounded_fields(out: str) -> list[pa.Field]:
    return [pa.field(f"{out}{suffix}", pa.int64()) for suffix in ("", "_lower", "_upper")]


def _between_bounds(out: str) -> list[str]:
    """An estimate's columns in order: lower bound, estimate, upper bound."""
    return [f"{out}_lower", out, f"{out}_upper"]


def _exact_for_all(agg: Aggregator) -> list:
    """The correction's value of an estimate with bounds: the exact count, for all three."""
    F = spark_functions()
    exact = F.count_distinct(agg.spark_input())
    return [exact.alias(f.name) for f in agg.output_fields()]


@register
class HllBounds(ApproxCountDistinct):
    """HLL distinct count with its lower and upper bound at ``std_devs`` (1-3) standard
    errors: ``{out}``, ``{out}_lower``, ``{out}_upper``. The correction: the exact count in
    all three."""

    name = "hll_bounds"
    description = Description(
        Range.NON_NEGATIVE, Measure.ESTIMATE_WITH_BOUNDS, Reconciled.REPRODUCED_SKETCH
    )
    params_schema = {"lg_k": int, "std_devs": int}

    @property
    def std_devs(self) -> int:
        return int(self.spec.params.get("std_devs", 2))

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> str | None:
        if params.get("std_devs", 2) not in (1, 2, 3):
            return f"std_devs must be 1, 2 or 3, not {params['std_devs']!r}"
        return None

    def result(self, state) -> dict[str, Any]:
        return _bounded_result(self.out, self.sketch(state), self.std_devs)

    def output_fields(self) -> list[pa.Field]:
        return _bounded_fields(self.out)

    def ordered_outputs(self) -> list[str]:
        return _between_bounds(self.out)

    def spark_columns(self, event_time):
        return _exact_for_all(self)


@register
class ThetaDistinct(Aggregator[Any]):
    """Theta sketch distinct count (DataSketches, seed 9001 as Spark's ``theta_sketch_agg``).

    Unlike HLL, theta sketches intersect and subtract: the states of two views or windows
    give "seen in both" and "seen in one but not the other"
    (:func:`theta_set_operation`). The correction: the exact count.
    """

    name = "theta_distinct"
    description = Description(Range.NON_NEGATIVE, Measure.ESTIMATE, Reconciled.REPRODUCED_SKETCH)
    input_kind = InputKind.HASHED
    counts = True
    params_schema = {"lg_k": int}

    @property
    def lg_k(self) -> int:
        return int(self.spec.params.get("lg_k", 12))

    def initialize(self):
        return ds.theta_union(self.lg_k)

    def update(self, state, values, times):
        sketch = ds.update_theta_sketch(self.lg_k)
        for item in set(values.tolist()):
            sketch.update(item)
        state.update(sketch)
        return state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(ThetaDistinct):
            return self.update_each(states, values, times, bounds)
        items, cuts = values.tolist(), bounds.tolist()  # one conversion for every group
        for g, state in enumerate(states):
            sketch = ds.update_theta_sketch(self.lg_k)
            for item in set(items[cuts[g] : cuts[g + 1]]):
                sketch.update(item)
            state.update(sketch)

    def merge(self, a, b):
        merged = ds.theta_union(self.lg_k)
        merged.update(a.get_result())
        merged.update(b.get_result())
        return merged

    def serialize(self, state) -> bytes:
        return state.get_result().serialize()

    def deserialize(self, data: bytes):
        union = ds.theta_union(self.lg_k)
        union.update(ds.compact_theta_sketch.deserialize(data))
        return union

    def result(self, state) -> dict[str, Any]:
        return {self.out: round(state.get_result().get_estimate())}

    def spark_state(self, event_time):
        """Spark's theta sketch (DataSketches, seed 9001, same lg_k): compatible bytes."""
        return spark_functions().theta_sketch_agg(self.spark_input(), self.lg_k)

    def result_type(self) -> pa.DataType:
        return pa.int64()

    def relative_standard_error(self) -> float:
        """Theta's RSE in estimation mode, ~1/sqrt(k) with k = 2^lg_k."""
        return 1 / (2 ** (self.lg_k / 2))

    def spark_columns(self, event_time):
        return [spark_functions().count_distinct(self.spark_input()).alias(self.out)]


@register
class ThetaBounds(ThetaDistinct):
    """Theta distinct count with bounds at ``std_devs`` (1-3): ``{out}``, ``{out}_lower``,
    ``{out}_upper``. The correction: the exact count in all three."""

    name = "theta_bounds"
    description = Description(
        Range.NON_NEGATIVE, Measure.ESTIMATE_WITH_BOUNDS, Reconciled.REPRODUCED_SKETCH
    )
    params_schema = {"lg_k": int, "std_devs": int}
    check_params = HllBounds.check_params
    std_devs = HllBounds.std_devs

    def result(self, state) -> dict[str, Any]:
        return _bounded_result(self.out, state.get_result(), self.std_devs)

    def output_fields(self) -> list[pa.Field]:
        return _bounded_fields(self.out)

    def ordered_outputs(self) -> list[str]:
        return _between_bounds(self.out)

    def spark_columns(self, event_time):
        return _exact_for_all(self)


class _SplitPoints(Quantiles):
    """A KLL sketch read at given ``split_points`` (strictly increasing numbers)."""

    params_schema = {"split_points": list, "k": int}
    required_params = ("split_points",)

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> str | None:
        points = params.get("split_points")
        if points is None:
            return None
        if not points or not all(
            isinstance(p, int | float) and not isinstance(p, bool) for p in points
        ):
            return f"split_points must be a non-empty list of numbers, not {points!r}"
        if any(b <= a for a, b in itertools.pairwise(points)):
            return f"split_points must increase strictly: {points!r}"
        return None

    @property
    def split_points(self) -> list[float]:
        return [float(p) for p in self.spec.params["split_points"]]

    def column_names(self) -> list[str]:
        raise NotImplementedError

    def ordered_outputs(self) -> list[str]:
        return []

    def output_fields(self) -> list[pa.Field]:
        return [pa.field(name, self.value_type) for name in self.column_names()]

    value_type = pa.float64()


@register
class Cdf(_SplitPoints):
    """KLL rank: the share of values at or below each split point, ``{out}_le_{point}``.
    Within the sketch's normalized rank error (~1.65% at k=200) of the exact share, which the
    correction computes."""

    name = "cdf"
    description = Description(Range.UNIT_INTERVAL, reconciled=Reconciled.SHARE_RANK)

    def column_names(self) -> list[str]:
        return [f"{self.out}_le_{split_label(p)}" for p in self.split_points]

    def ordered_outputs(self) -> list[str]:
        return self.column_names()  # shares at increasing split points

    def result(self, state) -> dict[str, Any]:
        names = self.column_names()
        if state.is_empty():
            return dict.fromkeys(names)
        cdf = state.get_cdf(self.split_points, inclusive=True)
        return {name: float(share) for name, share in zip(names, cdf, strict=False)}

    def spark_columns(self, event_time):
        F = spark_functions()
        x = self.spark_input().cast("double")
        n = F.count(x)
        return [
            F.when(n > 0, F.sum(F.when(x <= p, 1).otherwise(0)) / n).alias(name)
            for p, name in zip(self.split_points, self.column_names(), strict=True)
        ]


@register
class Histogram(_SplitPoints):
    """KLL histogram: estimated counts of values in (-inf, p0], (p0, p1], ..., (p_last, inf),
    ``{out}_to_{p}`` and ``{out}_above_{p_last}``; each within rank error x count of the
    exact count, which the correction computes."""

    name = "histogram"
    description = Description(Range.NON_NEGATIVE, reconciled=Reconciled.BIN_RANK)
    value_type = pa.int64()
    counts = True

    def column_names(self) -> list[str]:
        names = [f"{self.out}_to_{split_label(p)}" for p in self.split_points]
        return [*names, f"{self.out}_above_{split_label(self.split_points[-1])}"]

    def result(self, state) -> dict[str, Any]:
        names = self.column_names()
        if state.is_empty():
            return dict.fromkeys(names, 0)
        n = state.n
        pmf = state.get_pmf(self.split_points, inclusive=True)
        return {name: round(share * n) for name, share in zip(names, pmf, strict=True)}

    def spark_columns(self, event_time):
        F = spark_functions()
        x = self.spark_input().cast("double")
        edges = [None, *self.split_points, None]
        columns = []
        for (low, high), name in zip(itertools.pairwise(edges), self.column_names(), strict=True):
            inside = x.isNotNull()
            if low is not None:
                inside = inside & (x > low)
            if high is not None:
                inside = inside & (x <= high)
            columns.append(F.sum(F.when(inside, 1).otherwise(0)).cast("long").alias(name))
        return columns


@register
class FrequentItems(TopK):
    """Frequent items with DataSketches' error bounds: ``[{"item", "estimate", "lower",
    "upper"}]``, at most ``k`` items, none a false positive (every listed item's true count
    is within [lower, upper]; with fewer distinct items than 3/4 of 2^lg_max_map_size the
    counts are exact). The correction lists the exact top k with lower = upper = count."""

    name = "frequent_items"
    description = Description(Range.ANY, reconciled=Reconciled.FREQUENCY_BOUNDS, spark_state=False)

    def result(self, state) -> dict[str, Any]:
        if state.is_empty():
            return {self.out: None}
        rows = state.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_POSITIVES)
        ranked = sorted(rows, key=lambda row: (-int(row[1]), row[0]))[: self.k]
        top = [
            {"item": item, "estimate": int(est), "lower": int(lb), "upper": int(ub)}
            for item, est, lb, ub in ranked
        ]
        return {self.out: orjson.dumps(top).decode()}

    def entry(self, ranked_item):
        F = spark_functions()
        count = ranked_item["count"]
        return F.struct(
            ranked_item["item"].alias("item"),
            count.alias("estimate"),
            count.alias("lower"),
            count.alias("upper"),
        )


def theta_set_operation(
    operation: str, left: bytes, right: bytes, lg_k: int = 12
) -> dict[str, float]:
    """``union``, ``intersection`` or ``difference`` (left not in right) of two serialized
    theta states (of two views or two windows), with its estimate and 2-sigma bounds."""
    a = ds.compact_theta_sketch.deserialize(left)
    b = ds.compact_theta_sketch.deserialize(right)
    if operation == "union":
        union = ds.theta_union(lg_k)
        union.update(a)
        union.update(b)
        result = union.get_result()
    elif operation == "intersection":
        intersection = ds.theta_intersection()
        intersection.update(a)
        intersection.update(b)
        result = intersection.get_result()
    elif operation == "difference":
        result = ds.theta_a_not_b().compute(a, b)
    else:
        raise ValueError(f"unknown theta operation {operation!r} (union, intersection, difference)")
    return {
        "estimate": result.get_estimate(),
        "lower": result.get_lower_bound(2),
        "upper": result.get_upper_bound(2),
    }
