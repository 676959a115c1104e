"""Spark frame helpers shared by the windowed and the session correction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.aggregators import Aggregator

__all__ = ["join_on_keys", "spark_frame_of"]


def join_on_keys(left: DataFrame, right: DataFrame, keys: Sequence[str]) -> DataFrame:
    """``left`` with ``right``'s other columns, matched on ``keys`` where null equals null.

    ``join(on=keys)`` compares with ``=``, under which a null grouping value matches nothing,
    so an inner join dropped a null group's row from every view with a two-stage aggregator
    (``top_k``) although the stream keeps that group.
    """
    renamed = {k: f"__right_{k}" for k in keys}
    right = right.select(
        *[F.col(k).alias(renamed[k]) for k in keys],
        *[c for c in right.columns if c not in renamed],
    )
    match = reduce(lambda a, b: a & b, [left[k].eqNullSafe(right[renamed[k]]) for k in keys])
    return left.join(right, on=match, how="inner").drop(*renamed.values())


def spark_frame_of(agg: Aggregator) -> Callable[[DataFrame, list[str]], DataFrame] | None:
    """An aggregator whose exact result needs more than one aggregate (``top_k``) provides
    ``spark_frame(events, keys) -> DataFrame`` of keys plus its output columns."""
    frame = getattr(agg, "spark_frame", None)
    return frame if callable(frame) else None
