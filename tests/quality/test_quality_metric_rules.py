"""Every aggregation type gets a quality rule from its own description.

One table over the registry: each type, on an input column the event schema bounds, has a
rule for every output column; the segment schema (pandera) accepts what the aggregation
really outputs and rejects a value beyond each rule, and the great-expectations suite holds
the same range. Pairs (distinct <= count, bounds around the estimate, ordered shares) follow
the descriptions too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from pipelines.aggregators import get, names
from pipelines.events.declaration import EVENT_TIME_MIN_MS
from pipelines.segments import HOUR_MS
from pipelines.views import View, parse_views
from pipelines.views.model import WINDOW_END, WINDOW_START
from quality.exceptions import SchemaViolation
from quality.expectations import SuiteResult, validate_table
from quality.schemas import SegmentKind, segment_spec, validate_frame
from quality.schemas.spec import FrameSpec, Rule, RuleKind

INT_COL = "bytes_tx"
STR_COL = "client"
SPLITS = {"split_points": [100, 5000, 500000]}
ERRORS = "bytes_tx > 1000"

# name -> (column, params, where): inputs the event schema bounds (bytes_tx >= 0)
TABLE: dict[str, tuple[str | None, dict[str, Any], str | None]] = {
    "count": (None, {}, None),
    "sum": (INT_COL, {}, None),
    "min": (INT_COL, {}, None),
    "max": (INT_COL, {}, None),
    "mean": (INT_COL, {}, None),
    "count_distinct": (STR_COL, {}, None),
    "approx_count_distinct": (STR_COL, {}, None),
    "quantiles": (INT_COL, {"quantiles": [0.5, 0.9]}, None),
    "top_k": (STR_COL, {"k": 3}, None),
    "first": (INT_COL, {}, None),
    "last": (INT_COL, {}, None),
    "variance": (INT_COL, {}, None),
    "stddev": (INT_COL, {}, None),
    "ratio": (INT_COL, {"denominator": INT_COL}, None),
    "count_if": (None, {}, ERRORS),
    "sum_if": (INT_COL, {}, ERRORS),
    "any_value": (INT_COL, {}, None),
    "max_by": (INT_COL, {"by": "event_time"}, None),
    "min_by": (INT_COL, {"by": "event_time"}, None),
    "mode": (INT_COL, {}, None),
    "frequent_items": (STR_COL, {"k": 3}, None),
    "hll_bounds": (STR_COL, {}, None),
    "theta_distinct": (STR_COL, {}, None),
    "theta_bounds": (STR_COL, {}, None),
    "cdf": (INT_COL, SPLITS, None),
    "histogram": (INT_COL, SPLITS, None),
}
EVENTS = {
    INT_COL: np.array([5, 70, 900, 4000, 250_000, 700_000, 900]),
    STR_COL: np.array(["c1", "c2", "c1", "c3", "c4", "c2", "c5"], dtype=object),
    "event_time": EVENT_TIME_MIN_MS + np.array([10, 20, 30, 40, 50, 60, 70]),
}


def test_every_registered_built_in_is_in_the_table() -> None:
    builtin = [n for n in names() if get(n).__module__.startswith("pipelines.aggregators.")]
    assert sorted(TABLE) == builtin


def one_aggregation_view(name: str, *others: dict[str, Any]) -> View:
    column, params, where = TABLE[name]
    entry: dict[str, Any] = {"aggregation": name, "aggregated_col_name": "out", "params": params}
    if column is not None:
        entry["col_name"] = column
    if where is not None:
        entry["where"] = where
    definition = {
        "name": f"one_{name}",
        "topic": "events",
        "grouping_cols": [],
        "interval": "10m",
        "aggregation_info": [entry, *others],
    }
    return parse_views([definition])[0]


def output_row(view: View) -> dict[str, Any]:
    """What the view's aggregation outputs for the sample events (its own result)."""
    row: dict[str, Any] = {}
    for agg in view.aggregators:
        kept = agg.rows(EVENTS)
        columns = EVENTS if kept is None else {k: v[kept] for k, v in EVENTS.items()}
        state = agg.update(agg.initialize(), agg.inputs(columns), columns["event_time"])
        state = agg.deserialize(agg.serialize(state))
        row |= agg.result(state)
    return row


def beyond(rule: Rule, like: Any) -> Any:
    """A value the rule rejects, of the type of ``like``."""
    match rule.kind:
        case RuleKind.GE:
            value = rule.value - 1
        case RuleKind.LE:
            value = rule.value + 1
        case RuleKind.LT:
            value = rule.value
        case RuleKind.NON_EMPTY:
            return ""
        case _:
            raise AssertionError(rule)
    return float(value) if isinstance(like, float) else int(value)


def one_column(spec: FrameSpec, column: str, value: Any) -> tuple[FrameSpec, pa.Table]:
    own = spec.column(column)
    assert own is not None
    return FrameSpec(f"{column} of {spec.name}", (own,)), pa.table(
        {column: pa.array([value], own.type)}
    )


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_aggregation_has_a_rule_that_holds_its_output(name: str) -> None:
    view = one_aggregation_view(name)
    spec = segment_spec(view, SegmentKind.QUERY)
    row = output_row(view)
    assert set(row) == set(view.metric_columns)
    for column, value in row.items():
        rules = spec.column(column).rules
        assert rules, f"{name}: no rule for {column}"
        assert value is not None
        validate_frame(*one_column(spec, column, value))
        for rule in rules:
            with pytest.raises(SchemaViolation, match=rule.label.split()[0]):
                validate_frame(*one_column(spec, column, beyond(rule, value)))


def query_rows(view: View, row: dict[str, Any]) -> pa.Table:
    """The first hour's windows of ``view``, each holding ``row``, as a query returns them."""
    starts = list(range(0, HOUR_MS, view.interval_ms))
    schema = view.output_schema()
    columns = {
        WINDOW_START: starts,
        WINDOW_END: [s + view.interval_ms for s in starts],
        "source": ["batch v1"] * len(starts),
        **{c: [row[c]] * len(starts) for c in view.metric_columns},
    }
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema})


def suite_of(view: View, table: pa.Table) -> SuiteResult:
    return validate_table(view, table, 0, HOUR_MS)


def _set(table: pa.Table, column: str, value: Any) -> pa.Table:
    values = table.column(column).to_pylist()
    values[0] = value
    index = table.schema.get_field_index(column)
    return table.set_column(index, table.schema.field(column), pa.array(values, table[column].type))


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_suite_holds_the_range_of_its_aggregation(name: str) -> None:
    view = one_aggregation_view(name)
    spec = segment_spec(view, SegmentKind.QUERY)
    row = output_row(view)
    clean = suite_of(view, query_rows(view, row))
    assert clean.success, [o.describe() for o in clean.failed]
    for column in view.metric_columns:
        ranges = [r for r in spec.column(column).rules if r.kind is not RuleKind.NON_EMPTY]
        assert ranges or isinstance(row[column], str), f"{name}: no range for {column}"
        for rule in ranges:
            broken = suite_of(view, query_rows(view, row | {column: beyond(rule, row[column])}))
            assert not broken.success
            assert {o.columns for o in broken.failed} >= {(column,)}, [
                o.describe() for o in broken.failed
            ]


def test_distinct_and_filtered_counts_are_at_most_the_count() -> None:
    view = one_aggregation_view(
        "count_if",
        {"aggregation": "count", "aggregated_col_name": "events"},
        {"aggregation": "theta_distinct", "col_name": STR_COL, "aggregated_col_name": "clients"},
        {"aggregation": "hll_bounds", "col_name": STR_COL, "aggregated_col_name": "hll"},
    )
    row = output_row(view)
    table = query_rows(view, row)
    assert suite_of(view, table).success
    for column in ("out", "clients", "hll"):
        broken = suite_of(view, _set(table, column, row["events"] + 1))
        rules = {o.rule for o in broken.failed}
        assert f"{column} <= events" in rules, rules


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("hll_bounds", "out_lower", "out"),
        ("theta_bounds", "out", "out_upper"),
        ("cdf", "out_le_100", "out_le_5000"),
        ("quantiles", "out_p50", "out_p90"),
    ],
)
def test_ordered_outputs_stay_in_order(name: str, low: str, high: str) -> None:
    view = one_aggregation_view(name)
    row = output_row(view)
    assert row[low] <= row[high]
    broken = suite_of(view, _set(query_rows(view, row), low, row[high] + 1))
    assert f"{low} <= {high}" in {o.rule for o in broken.failed}
