"""Aggregations that pick one value of the group: max_by, min_by and the exact mode.

Ties are broken by the value itself so that any order of updates and merges, and Spark,
pick the same one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pyarrow as pa

from pipelines.aggregators.base import (
    Aggregator,
    InputKind,
    JsonState,
    python_value,
    spark_functions,
    value_type,
)
from pipelines.aggregators.builtin import fold_best_pairs, pair_state
from pipelines.aggregators.description import Description, Range
from pipelines.aggregators.registry import register

__all__ = ["MaxBy", "MinBy", "Mode"]


def _value_type(agg: Aggregator) -> pa.DataType:
    return value_type(agg.spec.col_kind)


_python = python_value


@register
class MaxBy(JsonState):
    """The ``col_name`` value of the event with the largest ``by`` (ties: the largest value);
    kept as the pair (by, value). Spark: ``max(struct(by, value)).value``, the same order."""

    name = "max_by"
    description = Description(Range.OF_INPUT)
    params_schema = {"by": str}
    column_params = {"by": InputKind.NUMERIC}
    required_params = ("by",)
    pick = staticmethod(max)

    def initialize(self):
        return None

    def update(self, state, values, times):
        value, by = values
        best = by.max() if self.pick is max else by.min()
        tied = value[by == best]
        candidate = [_python(best), _python(self.pick(tied.tolist()))]
        return candidate if state is None else self.merge(state, candidate)

    def update_groups(self, states, values, times, bounds):
        value, by = values
        if not self.own_update(MaxBy) or by.dtype.kind not in "iu":
            return self.update_each(states, values, times, bounds)
        fold_best_pairs(self, states, by, value, bounds)

    def merge(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        return list(self.pick(tuple(a), tuple(b)))

    def result(self, state) -> dict[str, Any]:
        return {self.out: None if state is None else state[1]}

    def result_type(self) -> pa.DataType:
        return _value_type(self)

    def spark_state(self, event_time):
        F = spark_functions()
        pair = F.struct(
            F.col(self.spec.params["by"]).alias("by"), F.col(self.spec.col_name).alias("v")
        )
        pair = self.only(pair)
        return pair_state(F.max(pair) if self.pick is max else F.min(pair), "by", "v")

    def spark_columns(self, event_time):
        F = spark_functions()
        pair = F.struct(
            F.col(self.spec.params["by"]).alias("by"), F.col(self.spec.col_name).alias("v")
        )
        pair = self.only(pair)
        agg = F.max(pair) if self.pick is max else F.min(pair)
        return [agg.getField("v").alias(self.out)]


@register
class MinBy(MaxBy):
    """The ``col_name`` value of the event with the smallest ``by`` (ties: the smallest value)."""

    name = "min_by"
    description = Description(Range.OF_INPUT)
    pick = staticmethod(min)


@register
class Mode(Aggregator[Counter]):
    """The most frequent value, exactly (ties: the smallest). Keeps a count per distinct
    value, so use it on modest cardinalities (``frequent_items`` bounds the memory).
    Spark: ``mode(col, deterministic => true)``, which also picks the smallest of ties."""

    name = "mode"
    description = Description(Range.OF_INPUT, spark_state=False)

    def initialize(self) -> Counter:
        return Counter()

    def update(self, state, values, times):
        state.update(values.tolist())
        return state

    def merge(self, a, b):
        merged = Counter(a)
        merged.update(b)
        return merged

    def serialize(self, state) -> bytes:
        return orjson.dumps(sorted(state.items(), key=lambda pair: pair[0]))

    def deserialize(self, data: bytes) -> Counter:
        return Counter(dict(map(tuple, orjson.loads(data))))

    def result(self, state) -> dict[str, Any]:
        if not state:
            return {self.out: None}
        best = max(state.values())
        return {self.out: min(item for item, count in state.items() if count == best)}

    def result_type(self) -> pa.DataType:
        return _value_type(self)

    def spark_columns(self, event_time):
        F = spark_functions()
        return [F.mode(self.spark_input(), deterministic=True).alias(self.out)]
