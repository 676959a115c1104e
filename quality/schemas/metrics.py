"""The rules an aggregation's output columns follow, read from its own description.

Both the segment schemas (pandera) and the expectation suites (great-expectations) take their
per-metric rules from here, so an aggregation gets its checks by describing its output
(:class:`~pipelines.aggregators.Description`), without a list of names to extend.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines.aggregators import Aggregator, Measure, Range
from quality.schemas.archive import EVENT_RULES
from quality.schemas.spec import NON_EMPTY, Rule, RuleKind, ge, le

__all__ = ["counted_pairs", "metric_rules", "output_rules"]


def _non_negative(column: str) -> bool:
    return any(r.kind is RuleKind.GE and r.value >= 0 for r in EVENT_RULES.get(column, ()))


def output_rules(agg: Aggregator, field: pa.Field) -> tuple[Rule, ...]:
    """What every value of one output column of ``agg`` satisfies."""
    if pa.types.is_string(field.type):
        return (NON_EMPTY,)
    match agg.description.range:
        case Range.NON_NEGATIVE:
            return (ge(0),)
        case Range.UNIT_INTERVAL:
            return (ge(0), le(1))
        case Range.OF_INPUT:
            return EVENT_RULES.get(agg.spec.col_name or "", ())
        case Range.SIGN_OF_INPUT:
            inputs = agg.input_columns()
            return (ge(0),) if inputs and all(map(_non_negative, inputs)) else ()
        case Range.ANY:
            return ()
    raise AssertionError(agg.description.range)


def metric_rules(agg: Aggregator) -> dict[str, tuple[Rule, ...]]:
    """Output column -> its rules, for every output column of ``agg``."""
    return {f.name: output_rules(agg, f) for f in agg.output_fields()}


def counted_pairs(aggregators: list[Aggregator]) -> list[tuple[str, str]]:
    """(smaller, larger) output columns of one row: every distinct count, and every count
    under its own ``where:``, is at most the row's count of all its events (the first count
    without a filter of its own; without one there is nothing to compare with)."""
    counts = [a for a in aggregators if a.description.measure is Measure.COUNT]
    total = next((a.out for a in counts if a.where is None), None)
    if total is None:
        return []
    return [
        (a.out, total)
        for a in aggregators
        if a.description.measure.distinct or (a in counts and a.where is not None)
    ]
