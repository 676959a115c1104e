"""The built-in aggregations. Adding one is one small class with ``@register``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import datasketches as ds
import numpy as np
import orjson
import pyarrow as pa

from pipelines.aggregators.base import (
    Aggregator,
    InputKind,
    JsonState,
    exact_value,
    json_state,
    json_values,
    number_type,
    python_value,
    spark_functions,
    spark_type,
    value_type,
)
from pipelines.aggregators.description import Description, Measure, Range, Reconciled
from pipelines.aggregators.registry import register

__all__ = [
    "ApproxCountDistinct",
    "Count",
    "CountDistinct",
    "First",
    "Last",
    "Max",
    "Mean",
    "Min",
    "Quantiles",
    "Sum",
    "TopK",
    "fold_best_pairs",
    "item_texts",
    "pair_state",
]


_F = spark_functions
_JsonState = JsonState
_HLL_MODE = 2
"""The current-mode bits of a compact HLL sketch's byte 7 when it holds registers."""
_OUT_OF_ORDER = 16
"""The out-of-order flag of a compact HLL sketch's byte 5."""


@register
class Count(_JsonState):
    name = "count"
    description = Description(Range.NON_NEGATIVE, Measure.COUNT, Reconciled.EVENT_COUNT)
    input_kind = InputKind.NONE
    counts = True

    def initialize(self) -> int:
        return 0

    def update(self, state: int, values: np.ndarray | None, times: np.ndarray) -> int:
        return state + len(times)

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Count):
            return self.update_each(states, values, times, bounds)
        states[:] = [s + n for s, n in zip(states, np.diff(bounds).tolist(), strict=True)]

    def merge(self, a: int, b: int) -> int:
        return a + b

    def result(self, state: int) -> dict[str, Any]:
        return {self.out: state}

    def result_type(self) -> pa.DataType:
        return pa.int64()

    def spark_state(self, event_time):
        return json_state(_F().count(self.only(event_time)))

    def spark_columns(self, event_time):
        return [_F().count(self.only(event_time)).alias(self.out)]


@register
class Sum(_JsonState):
    """The sum of the values: null over no value (all null, or none its ``where:`` keeps), as
    SQL's ``sum``. A long column's sum is an exact integer; a double column's is summed in
    doubles, in another order by Spark (the reconciliation allows for it)."""

    name = "sum"
    description = Description(Range.SIGN_OF_INPUT)
    input_kind = InputKind.NUMERIC

    def initialize(self) -> float | None:
        return None

    def update(self, state, values, times):
        if not len(values):
            return state
        total = values.sum().item()
        return total if state is None else state + total

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Sum) or not _integers(values):
            return self.update_each(states, values, times, bounds)
        sums = np.add.reduceat(values, bounds[:-1]).tolist()  # int64 wraps as .sum() does
        states[:] = [x if s is None else s + x for s, x in zip(states, sums, strict=True)]

    def merge(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        return a + b

    def result(self, state) -> dict[str, Any]:
        return {self.out: None if state is None else exact_value(self, state)}

    def result_type(self) -> pa.DataType:
        return number_type(self)

    def spark_state(self, event_time):
        return json_state(_F().sum(self.spark_input()))

    def spark_columns(self, event_time):
        return [_F().sum(self.spark_input()).cast(spark_type(self)).alias(self.out)]


@register
class Min(_JsonState):
    """The smallest value (any type: a timestamp in epoch ms, false before true, strings by
    code point as Spark and DuckDB order UTF-8 bytes)."""

    name = "min"
    description = Description(Range.OF_INPUT)
    input_kind = InputKind.ANY

    def initialize(self):
        return None

    def update(self, state, values, times):
        if not len(values):
            return state
        low = python_value(values.min())
        return low if state is None or low < state else state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Min) or not _integers(values):
            return self.update_each(states, values, times, bounds)
        lows = np.minimum.reduceat(values, bounds[:-1]).tolist()
        states[:] = [x if s is None or x < s else s for s, x in zip(states, lows, strict=True)]

    def merge(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        return min(a, b)

    def result(self, state) -> dict[str, Any]:
        return {self.out: None if state is None else exact_value(self, state)}

    def result_type(self) -> pa.DataType:
        return value_type(self.spec.col_kind, pa.float64())

    def spark_state(self, event_time):
        return json_state(_F().min(self.spark_input()))

    def spark_columns(self, event_time):
        return [_F().min(self.spark_input()).cast(spark_type(self)).alias(self.out)]


@register
class Max(Min):
    name = "max"
    description = Description(Range.OF_INPUT)

    def update(self, state, values, times):
        if not len(values):
            return state
        high = python_value(values.max())
        return high if state is None or high > state else state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Max) or not _integers(values):
            return self.update_each(states, values, times, bounds)
        highs = np.maximum.reduceat(values, bounds[:-1]).tolist()
        states[:] = [x if s is None or x > s else s for s, x in zip(states, highs, strict=True)]

    def merge(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        return max(a, b)

    def spark_state(self, event_time):
        return json_state(_F().max(self.spark_input()))

    def spark_columns(self, event_time):
        return [_F().max(self.spark_input()).cast(spark_type(self)).alias(self.out)]


@register
class Mean(_JsonState):
    """Keeps (sum, count) so that means of partials merge exactly."""

    name = "mean"
    description = Description(Range.OF_INPUT)
    input_kind = InputKind.NUMERIC

    def initialize(self) -> list:
        return [0, 0]

    def update(self, state, values, times):
        return [state[0] + values.sum().item(), state[1] + len(values)]

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Mean) or not _integers(values):
            return self.update_each(states, values, times, bounds)
        sums = np.add.reduceat(values, bounds[:-1]).tolist()
        counts = np.diff(bounds).tolist()
        states[:] = [[s[0] + x, s[1] + n] for s, x, n in zip(states, sums, counts, strict=True)]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, state) -> dict[str, Any]:
        return {self.out: state[0] / state[1] if state[1] else None}

    def spark_state(self, event_time):
        F = _F()
        return json_state(
            F.coalesce(F.sum(self.spark_input()), F.lit(0)), F.count(self.spark_input())
        )

    def spark_columns(self, event_time):
        return [_F().avg(self.spark_input()).cast("double").alias(self.out)]


@register
class CountDistinct(Aggregator[set]):
    """Exact distinct count: keeps the set, so use it only on modest cardinalities."""

    name = "count_distinct"
    description = Description(Range.NON_NEGATIVE, Measure.DISTINCT)
    counts = True

    def initialize(self) -> set:
        return set()

    def update(self, state, values, times):
        state.update(values.tolist())
        return state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(CountDistinct):
            return self.update_each(states, values, times, bounds)
        items, cuts = values.tolist(), bounds.tolist()
        for g, state in enumerate(states):
            state.update(items[cuts[g] : cuts[g + 1]])

    def merge(self, a, b):
        return a | b

    def serialize(self, state) -> bytes:
        return orjson.dumps(sorted(state, key=str))

    def deserialize(self, data: bytes) -> set:
        return set(orjson.loads(data))

    def deserialize_many(self, blobs: Sequence[bytes]) -> list[set]:
        values = json_values(blobs)
        return super().deserialize_many(blobs) if values is None else [set(v) for v in values]

    def result(self, state) -> dict[str, Any]:
        return {self.out: len(state)}

    def result_type(self) -> pa.DataType:
        return pa.int64()

    def spark_state(self, event_time):
        F = _F()
        return F.to_json(F.array_sort(F.collect_set(self.spark_input()))).cast("binary")

    def spark_columns(self, event_time):
        return [_F().count_distinct(self.spark_input()).alias(self.out)]


@register
class ApproxCountDistinct(Aggregator[Any]):
    """HyperLogLog (Apache DataSketches), the format Spark's ``hll_sketch_agg`` also writes.

    State is an ``hll_union`` so merges never lose precision; Spark computes the exact count,
    which is what a correction should publish.
    """

    name = "approx_count_distinct"
    description = Description(Range.NON_NEGATIVE, Measure.ESTIMATE, Reconciled.REPRODUCED_SKETCH)
    input_kind = InputKind.HASHED
    counts = True
    params_schema = {"lg_k": int}

    @property
    def lg_k(self) -> int:
        return int(self.spec.params.get("lg_k", 12))

    def initialize(self):
        return ds.hll_union(self.lg_k)

    def update(self, state, values, times):
        sketch = ds.hll_sketch(self.lg_k, ds.tgt_hll_type.HLL_8)
        for item in set(values.tolist()):
            sketch.update(item)
        state.update(sketch)
        return state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(ApproxCountDistinct):
            return self.update_each(states, values, times, bounds)
        items, cuts = values.tolist(), bounds.tolist()  # one conversion for every group
        for g, state in enumerate(states):
            sketch = ds.hll_sketch(self.lg_k, ds.tgt_hll_type.HLL_8)
            for item in set(items[cuts[g] : cuts[g + 1]]):
                sketch.update(item)
            state.update(sketch)

    def merge(self, a, b):
        merged = ds.hll_union(self.lg_k)
        merged.update(a.get_result())
        merged.update(b.get_result())
        return merged

    def serialize(self, state) -> bytes:
        return state.get_result(ds.tgt_hll_type.HLL_8).serialize_compact()

    def deserialize(self, data: bytes):
        union = ds.hll_union(self.lg_k)
        union.update(ds.hll_sketch.deserialize(data))
        return union

    def result(self, state) -> dict[str, Any]:
        return {self.out: round(self.sketch(state).get_estimate())}

    def sketch(self, state) -> Any:
        """The state as a sketch estimated from its registers alone (DataSketches'
        composite estimator), so the estimate depends only on the values that went in.

        A sketch built in order keeps a second, "HIP" estimate, which a union keeps while it
        has merged only that one sketch: a group that fitted in one batch (or one Spark
        partition) was estimated differently from the same values split in two. Marking the
        compact sketch out of order (preamble byte 5, flag 16) drops it.
        """
        data = bytearray(state.get_result(ds.tgt_hll_type.HLL_8).serialize_compact())
        if data[7] & 3 == _HLL_MODE:
            data[5] |= _OUT_OF_ORDER
        return ds.hll_sketch.deserialize(bytes(data))

    def result_type(self) -> pa.DataType:
        return pa.int64()

    def relative_standard_error(self) -> float:
        """HLL's RSE, ~1.04/sqrt(2^lg_k); tolerances are stated in multiples of it."""
        return 1.04 / (2 ** (self.lg_k / 2))

    def spark_state(self, event_time):
        """Spark's own HLL (DataSketches, HLL_8 at the same lg_k): the stream's estimate
        from it is the stream's own where the same events went in (docs/aggregations.md)."""
        return _F().hll_sketch_agg(self.spark_input(), self.lg_k)

    def spark_columns(self, event_time):
        return [_F().count_distinct(self.spark_input()).alias(self.out)]


@register
class Quantiles(Aggregator[Any]):
    """KLL quantiles sketch; outputs one column per quantile, e.g. ``latency_p95``.

    The q-quantile is the smallest value whose share of values at or below it reaches q
    (KLL's inclusive rank, SQL's ``percentile_disc``): a value that occurred, never an
    interpolation, so the stream's estimate and the exact correction mean the same thing
    and differ only by the sketch's rank error.
    """

    name = "quantiles"
    description = Description(Range.OF_INPUT, reconciled=Reconciled.QUANTILE_RANK)
    input_kind = InputKind.NUMERIC
    params_schema = {"quantiles": list, "k": int}

    @property
    def quantiles(self) -> list[float]:
        return [float(q) for q in self.spec.params.get("quantiles", [0.5, 0.95, 0.99])]

    @property
    def k(self) -> int:
        return int(self.spec.params.get("k", 200))

    def rank_error(self) -> float:
        """KLL's normalized rank error at this k (single quantile, 99% confidence)."""
        return ds.kll_doubles_sketch.get_normalized_rank_error(self.k, False)

    def quantile_of(self, column: str) -> float:
        """The quantile an output column holds (its :meth:`column_for`)."""
        return next(q for q in self.quantiles if self.column_for(q) == column)

    def column_for(self, q: float) -> str:
        label = f"{q * 100:g}".replace(".", "_")
        return f"{self.out}_p{label}"

    def initialize(self):
        return ds.kll_doubles_sketch(self.k)

    def update(self, state, values, times):
        state.update(values.astype(np.float64))
        return state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(Quantiles):
            return self.update_each(states, values, times, bounds)
        doubles, cuts = values.astype(np.float64), bounds.tolist()
        for g, state in enumerate(states):
            state.update(doubles[cuts[g] : cuts[g + 1]])

    def merge(self, a, b):
        merged = ds.kll_doubles_sketch(self.k)
        merged.merge(a)
        merged.merge(b)
        return merged

    def serialize(self, state) -> bytes:
        return state.serialize()

    def deserialize(self, data: bytes):
        return ds.kll_doubles_sketch.deserialize(data)

    def result(self, state) -> dict[str, Any]:
        if state.is_empty():
            return {self.column_for(q): None for q in self.quantiles}
        return {
            self.column_for(q): float(state.get_quantile(q, inclusive=True)) for q in self.quantiles
        }

    def output_fields(self) -> list[pa.Field]:
        return [pa.field(self.column_for(q), pa.float64()) for q in self.quantiles]

    def ordered_outputs(self) -> list[str]:
        return [self.column_for(q) for q in sorted(set(self.quantiles))]

    def spark_state(self, event_time):
        """Spark's KLL (DataSketches doubles sketch at the same k): mergeable with the
        stream's, though not bit-identical (compaction is random)."""
        return _F().kll_sketch_agg_double(self.spark_input().cast("double"), self.k)

    def spark_columns(self, event_time):
        """All quantiles from one ``percentile_disc`` over an array of percentages.

        The same function as one ``percentile_disc(q)`` per quantile (same inclusive rank,
        same values), but its buffer of the group's values is built once: three separate
        aggregates kept three buffers, which made the quantiles ~20% of a correction.
        Spark plans the identical aggregate once for all the columns picked from it.
        """
        F = _F()
        col = f"CAST(`{self.spec.col_name}` AS DOUBLE)"
        if self.where is not None:  # percentile_disc skips nulls, as the filtered stream does
            col = f"CASE WHEN {self.where.sql(spark=True)} THEN {col} END"
        percentages = ", ".join(repr(q) for q in self.quantiles)
        every = F.expr(f"percentile_disc(array({percentages})) WITHIN GROUP (ORDER BY {col})")
        return [every[i].alias(self.column_for(q)) for i, q in enumerate(self.quantiles)]


@register
class TopK(Aggregator[Any]):
    """Most frequent items (DataSketches frequent items); result is a JSON list.

    The result is ``[{"item": ..., "count": ...}, ...]``, most frequent first, ties by item.
    """

    name = "top_k"
    description = Description(Range.ANY, reconciled=Reconciled.REPORTED, spark_state=False)
    params_schema = {"k": int, "lg_max_map_size": int}

    @property
    def k(self) -> int:
        return int(self.spec.params.get("k", 10))

    @property
    def lg_max_map_size(self) -> int:
        return int(self.spec.params.get("lg_max_map_size", 10))

    def initialize(self):
        return ds.frequent_strings_sketch(self.lg_max_map_size)

    def update(self, state, values, times):
        for item, count in Counter(item_texts(values)).items():
            state.update(item, count)
        return state

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(TopK):
            return self.update_each(states, values, times, bounds)
        items, cuts = item_texts(values), bounds.tolist()
        for g, state in enumerate(states):
            for item, count in Counter(items[cuts[g] : cuts[g + 1]]).items():
                state.update(item, count)

    def merge(self, a, b):
        merged = ds.frequent_strings_sketch(self.lg_max_map_size)
        merged.merge(a)
        merged.merge(b)
        return merged

    def serialize(self, state) -> bytes:
        return state.serialize()

    def deserialize(self, data: bytes):
        return ds.frequent_strings_sketch.deserialize(data)

    def result(self, state) -> dict[str, Any]:
        if state.is_empty():  # no value: null, as every aggregation but the counts
            return {self.out: None}
        rows = state.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_POSITIVES)
        ranked = sorted(((int(est), item) for item, est, _lb, _ub in rows), key=_rank)
        top = [{"item": item, "count": count} for count, item in ranked[: self.k]]
        return {self.out: orjson.dumps(top).decode()}

    def result_type(self) -> pa.DataType:
        return pa.string()

    def spark_columns(self, event_time):
        raise NotImplementedError("top_k needs two stages in Spark: use spark_frame")

    def spark_frame(self, events, keys: list[str]):
        """Exact top k per key, in two stages that scale with the number of distinct items.

        1. Count each item per key (one hash aggregation).
        2. Keep the k best per key by (count desc, item asc) and render them as the same
           JSON the stream writes (items as strings, most frequent first, ties by item).

        Returns a DataFrame of ``keys`` plus the output column, to be joined on ``keys``.
        Strings compare by UTF-8 bytes in Spark and by code point in Python: same order.
        """
        from pyspark.sql import Window

        F = _F()
        # Items a ``where:`` drops, and null items, become null: ranked last and never
        # listed, so a group with no item still has its row (null, as the stream's).
        item = self.spark_input().cast("string").alias("item")
        counts = events.groupBy(*keys, item).agg(F.count(F.lit(1)).alias("count"))
        dropped = F.col("item").isNull()
        best = Window.partitionBy(*keys).orderBy(dropped, F.col("count").desc(), F.col("item"))
        ranked = counts.withColumn("rank", F.row_number().over(best)).where(F.col("rank") <= self.k)
        listed = F.when(~dropped, F.struct("rank", "item", "count"))
        top = F.array_sort(F.collect_list(listed))
        listing = F.when(F.size(top) > 0, F.to_json(F.transform(top, self.entry)))
        return ranked.groupBy(*keys).agg(listing.alias(self.out))

    def entry(self, ranked_item):
        """One listed item as the stream writes it (``spark_frame`` renders each so)."""
        F = _F()
        return F.struct(ranked_item["item"].alias("item"), ranked_item["count"].alias("count"))


def pair_state(picked, first: str, second: str):
    """The JSON state ``[first, second]`` of a picked struct, or ``null`` when none was."""
    F = _F()
    both = json_state(picked.getField(first), picked.getField(second))
    return F.when(picked.isNotNull(), both).otherwise(F.lit("null").cast("binary"))


def fold_best_pairs(
    agg: Aggregator, states: list, keys: np.ndarray, values: np.ndarray, bounds: np.ndarray
) -> None:
    """Fold each group's best ``[key, value]`` pair into its state: ``agg.pick`` (min or max)
    of the keys, ties by the same pick of the values, then ``agg.merge`` with what the state
    held. Rows are sorted by group, ``bounds`` the groups' row ranges (first/last by event
    time, max_by and min_by)."""
    pick = agg.pick
    best = (np.minimum if pick is min else np.maximum).reduceat(keys, bounds[:-1])
    group = np.repeat(np.arange(len(states)), np.diff(bounds))
    tied = np.flatnonzero(keys == best[group])  # the rows at each group's best key
    picked: dict[int, Any] = {}
    for g, value in zip(group[tied].tolist(), values[tied].tolist(), strict=True):
        picked[g] = pick(picked[g], value) if g in picked else value
    for g, (state, key) in enumerate(zip(states, best.tolist(), strict=True)):
        candidate = [key, picked[g]]
        states[g] = candidate if state is None else agg.merge(state, candidate)


def item_texts(values: np.ndarray) -> list[str]:
    """Items as ranked by top_k and frequent_items: text, as Spark casts them to string
    (a boolean as ``true``/``false``)."""
    if values.dtype == object:
        return values.tolist()
    if values.dtype.kind == "b":
        return ["true" if item else "false" for item in values.tolist()]
    return [str(item) for item in values.tolist()]


def _integers(values: Any) -> bool:
    """Whether ``values`` is an integer array, whose sums numpy's reductions give exactly as
    the per-group ``.sum()`` does (float sums could round differently)."""
    return isinstance(values, np.ndarray) and values.dtype.kind in "iu"


def _rank(pair: tuple[int, str]) -> tuple[int, str]:
    return (-pair[0], pair[1])


class _ByEventTime(_JsonState):
    """First/last value by event time; ties broken by the value so merges are deterministic."""

    pick = staticmethod(min)

    def initialize(self):
        return None

    def update(self, state, values, times):
        index = int(np.argmin(times) if self.pick is min else np.argmax(times))
        t = int(times[index])
        tied = values[times == t].tolist()
        candidate = [t, self.pick(tied)]
        return candidate if state is None else self.merge(state, candidate)

    def update_groups(self, states, values, times, bounds):
        if not self.own_update(_ByEventTime):
            return self.update_each(states, values, times, bounds)
        fold_best_pairs(self, states, times, values, bounds)

    def merge(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        return self.pick(a, b, key=lambda pair: (pair[0], pair[1]))

    def result(self, state) -> dict[str, Any]:
        return {self.out: None if state is None else state[1]}

    def result_type(self) -> pa.DataType:
        return value_type(self.spec.col_kind)

    def spark_state(self, event_time):
        F = _F()
        pair = self.only(F.struct(event_time.alias("t"), F.col(self.spec.col_name).alias("v")))
        picked = F.min(pair) if self.pick is min else F.max(pair)
        return pair_state(picked, "t", "v")

    def spark_columns(self, event_time):
        F = _F()
        pair = F.struct(event_time.alias("t"), F.col(self.spec.col_name).alias("v"))
        pair = self.only(pair)
        agg = F.min(pair) if self.pick is min else F.max(pair)
        return [agg.getField("v").alias(self.out)]


@register
class First(_ByEventTime):
    name = "first"
    description = Description(Range.OF_INPUT)
    pick = staticmethod(min)


@register
class Last(_ByEventTime):
    name = "last"
    description = Description(Range.OF_INPUT)
    pick = staticmethod(max)
