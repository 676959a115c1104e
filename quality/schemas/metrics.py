"""The rules an aggregation's output columns follow, read from its own description.

Both the segment schemas (pandera) and the expectation suites (great-expectations) take their
per-metric rules from here, so an aggregation gets its checks by describing its output
(:class:`~pipelines.aggregators.Description`), without a list of names to extend.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines.aggregators import Aggregator, Measure, Range
from pipelines.events.declaration import ColumnType, TopicDeclaration
from quality.schemas.archive import column_rules
from quality.schemas.spec import NON_EMPTY, Rule, ge, le

__all__ = ["counted_pairs", "metric_rules", "output_rules"]


def _minimum(declaration: TopicDeclaration | None, column: str | None) -> float | None:
    """The ``minimum`` ``declaration`` gives ``column`` (None: none declared or known)."""
    if declaration is None:
        return None
    field = next((f for f in declaration.fields if f.name == column), None)
    return None if field is None else field.minimum


def _may_be_empty(declaration: TopicDeclaration | None, column: str | None) -> bool:
    """Whether ``column``'s strings may be empty: those of a nullable string field."""
    if declaration is None or column is None:
        return False
    if declaration.columns().get(column) is not ColumnType.STRING:
        return False
    return NON_EMPTY not in column_rules(declaration).get(column, ())


def output_rules(
    agg: Aggregator, field: pa.Field, declaration: TopicDeclaration | None = None
) -> tuple[Rule, ...]:
    """What every value of one output column of ``agg`` satisfies; the input's range is what
    its topic's ``declaration`` says (unknown without one)."""
    how = agg.description.range
    if pa.types.is_string(field.type):
        if how is Range.OF_INPUT and _may_be_empty(declaration, agg.spec.col_name):
            return ()
        return (NON_EMPTY,)
    match how:
        case Range.NON_NEGATIVE:
            return (ge(0),)
        case Range.UNIT_INTERVAL:
            return (ge(0), le(1))
        case Range.OF_INPUT:
            low = _minimum(declaration, agg.spec.col_name)
            return () if low is None else (ge(low),)
        case Range.SIGN_OF_INPUT:
            inputs = agg.input_columns()
            lows = [_minimum(declaration, c) for c in inputs]
            return (ge(0),) if inputs and all(m is not None and m >= 0 for m in lows) else ()
        case Range.ANY:
            return ()
    raise AssertionError(agg.description.range)


def metric_rules(
    agg: Aggregator, declaration: TopicDeclaration | None = None
) -> dict[str, tuple[Rule, ...]]:
    """Output column -> its rules, for every output column of ``agg`` over a topic declared
    by ``declaration``."""
    return {f.name: output_rules(agg, f, declaration) for f in agg.output_fields()}


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
