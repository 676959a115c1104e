"""Exact statistics that merge in a few numbers: variance, ratio, conditional counts and sums.

Every one has an exact Spark equivalent, so the correction publishes the true value and the
reconciliation holds the stream to it (floating-point sums may differ in the last bits).
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any

import pyarrow as pa

from pipelines.aggregators.base import (
    Aggregator,
    InputKind,
    JsonState,
    json_state,
    python_value,
    spark_functions,
    value_type,
)
from pipelines.aggregators.builtin import Count, Sum
from pipelines.aggregators.description import Description, Measure, Range
from pipelines.aggregators.registry import register

__all__ = ["AnyValue", "CountIf", "Ratio", "StdDev", "SumIf", "Variance"]


@register
class Variance(Aggregator[list]):
    """Sample variance (Spark's ``var_samp``), kept as (count, sum, sum of squares) in exact
    integers (event fields are integers): partials merge by addition with no rounding, so
    the result is the correctly rounded variance whatever the batches or merge order were,
    and a replay rewrites it bit for bit (a floating (count, mean, M2) state by Chan's rule
    differed in the last bits with the batch cuts). Serialized with the standard library's
    JSON, whose integers have no 64-bit limit."""

    name = "variance"
    description = Description(Range.NON_NEGATIVE)
    input_kind = InputKind.NUMERIC
    may_be_null = True  # one event has no sample variance

    def initialize(self) -> list:
        return [0, 0, 0]

    def update(self, state, values, times):
        items = values.tolist()
        return [
            state[0] + len(items),
            state[1] + sum(items),
            state[2] + sum(map(operator.mul, items, items)),
        ]

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Variance):
            return self.update_each(states, values, times, bounds)
        items, cuts = values.tolist(), bounds.tolist()  # Python numbers: sums exact as before
        for g, state in enumerate(states):
            part = items[cuts[g] : cuts[g + 1]]
            states[g] = [
                state[0] + len(part),
                state[1] + sum(part),
                state[2] + sum(map(operator.mul, part, part)),
            ]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1], a[2] + b[2]]

    def serialize(self, state) -> bytes:
        return json.dumps(state).encode()

    def deserialize(self, data: bytes) -> list:
        return json.loads(data)

    def variance(self, state) -> float | None:
        n, total, squares = state
        if n < 2:
            return None
        return (n * squares - total * total) / (n * (n - 1))  # exact, then one rounding

    def result(self, state) -> dict[str, Any]:
        return {self.out: self.variance(state)}

    def spark_state(self, event_time):
        F = spark_functions()
        exact = "decimal(38,0)" if self.spec.col_kind == "int" else "double"
        x = self.spark_input().cast(exact)
        zero = F.lit(0).cast(exact)
        return json_state(F.count(x), F.coalesce(F.sum(x), zero), F.coalesce(F.sum(x * x), zero))

    def spark_columns(self, event_time):
        F = spark_functions()
        return [F.var_samp(self.spark_input().cast("double")).alias(self.out)]


@register
class StdDev(Variance):
    """Sample standard deviation (Spark's ``stddev_samp``), the square root of ``variance``."""

    name = "stddev"
    description = Description(Range.NON_NEGATIVE)

    def result(self, state) -> dict[str, Any]:
        variance = self.variance(state)
        return {self.out: None if variance is None else math.sqrt(max(variance, 0.0))}

    def spark_columns(self, event_time):
        F = spark_functions()
        return [F.stddev_samp(self.spark_input().cast("double")).alias(self.out)]


@register
class Ratio(JsonState):
    """sum(col_name) / sum(denominator), kept as both sums (null when the denominator is 0)."""

    name = "ratio"
    description = Description(Range.SIGN_OF_INPUT)
    input_kind = InputKind.NUMERIC
    params_schema = {"denominator": str}
    column_params = {"denominator": InputKind.NUMERIC}
    required_params = ("denominator",)

    def initialize(self) -> list:
        return [0, 0]

    def update(self, state, values, times):
        numerator, denominator = values
        return [state[0] + numerator.sum().item(), state[1] + denominator.sum().item()]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]

    may_be_null = True  # a zero denominator

    def result(self, state) -> dict[str, Any]:
        return {self.out: state[0] / state[1] if state[1] else None}

    def spark_state(self, event_time):
        F = spark_functions()
        denominator = self.spark_input(self.spec.params["denominator"])
        zero = F.lit(0)
        return json_state(
            F.coalesce(F.sum(self.spark_input()), zero), F.coalesce(F.sum(denominator), zero)
        )

    def spark_columns(self, event_time):
        F = spark_functions()
        numerator = F.sum(self.spark_input().cast("double"))
        denominator = F.sum(self.spark_input(self.spec.params["denominator"]).cast("double"))
        ratio = F.when(denominator != 0, numerator / denominator)
        return [ratio.alias(self.out)]


@register
class CountIf(Count):
    """Events that pass the aggregation's own ``where:`` (required)."""

    name = "count_if"
    description = Description(
        Range.NON_NEGATIVE, Measure.COUNT
    )  # its where: drops events the causes count
    needs_where = True


@register
class SumIf(Sum):
    """The sum over events that pass the aggregation's own ``where:`` (required); null when
    none does, as SQL's ``sum``."""

    name = "sum_if"
    description = Description(Range.SIGN_OF_INPUT)
    needs_where = True


@register
class AnyValue(JsonState):
    """One value of the group. Which one is fixed (the smallest) so that a replay, a merge in
    any order and the correction all pick the same; Spark's ``any_value`` would not."""

    name = "any_value"
    description = Description(Range.OF_INPUT)

    def initialize(self):
        return None

    def update(self, state, values, times):
        if not len(values):
            return state
        low = python_value(values.min())
        return low if state is None or low < state else state

    def merge(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        return min(a, b)

    def result(self, state) -> dict[str, Any]:
        return {self.out: state}

    def result_type(self) -> pa.DataType:
        return value_type(self.spec.col_kind)

    def spark_state(self, event_time):
        return json_state(spark_functions().min(self.spark_input()))

    def spark_columns(self, event_time):
        return [spark_functions().min(self.spark_input()).alias(self.out)]
