"""Every aggregator: merge is associative and commutative, and merging partials equals the whole."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.aggregators import AggregationSpec, build, get, names

INT_COL = "bytes_tx"
STR_COL = "client"

# name -> (column, col kind, params, how results compare)
TABLE = {
    "count": (None, None, {}, "exact"),
    "sum": (INT_COL, "int", {}, "exact"),
    "min": (INT_COL, "int", {}, "exact"),
    "max": (INT_COL, "int", {}, "exact"),
    "mean": (INT_COL, "int", {}, "close"),
    "count_distinct": (STR_COL, "string", {}, "exact"),
    "approx_count_distinct": (STR_COL, "string", {"lg_k": 12}, "hll"),
    "quantiles": (INT_COL, "int", {"quantiles": [0.5, 0.95, 0.99]}, "rank"),
    "top_k": (STR_COL, "string", {"k": 3}, "exact"),
    "first": (STR_COL, "string", {}, "exact"),
    "last": (STR_COL, "string", {}, "exact"),
}


def test_every_registered_aggregation_is_in_the_table():
    """Every built-in one (a test may register its own, e.g. tests/fixtures/poison.py)."""
    builtin = [n for n in names() if get(n).__module__ == "pipelines.aggregators.builtin"]
    assert sorted(TABLE) == builtin


def _agg(name: str):
    col, kind, params, _ = TABLE[name]
    return build(AggregationSpec(name, col, "out", params, kind))


rows = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=10**6),  # value
        st.integers(min_value=0, max_value=40),  # client id
        st.integers(min_value=0, max_value=10**4),  # event time
    ),
    min_size=1,
    max_size=300,
)


def _arrays(chunk):
    values = np.array([r[0] for r in chunk], dtype=np.int64)
    clients = np.array([f"c{r[1]}" for r in chunk], dtype=object)
    times = np.array([r[2] for r in chunk], dtype=np.int64)
    return values, clients, times


def _fold(agg, chunk):
    state = agg.initialize()
    if not chunk:
        return state
    values, clients, times = _arrays(chunk)
    col = agg.spec.col_name
    inputs = None if col is None else values if col == INT_COL else clients
    return agg.update(state, inputs, times)


def _roundtrip(agg, state):
    return agg.deserialize(agg.serialize(state))


def _result(name: str, agg, state):
    result = agg.result(state)
    return result if name == "quantiles" else result["out"]


def _assert_same(name: str, agg, left, right, n: int, whole_chunk) -> None:
    how = TABLE[name][3]
    a, b = _result(name, agg, left), _result(name, agg, right)
    if how == "exact":
        assert a == b
    elif how == "close":
        assert math.isclose(a, b, rel_tol=1e-12)
    elif how == "hll":
        sigma = agg.relative_standard_error() * max(b, 1)
        assert abs(a - b) <= 3 * sigma + 1
    elif how == "rank":
        # KLL: every quantile of the merged sketch is within the sketch's rank error of the truth.
        values = np.sort(_arrays(whole_chunk)[0])
        eps = 0.02  # k=200 normalized rank error is ~1.65%
        for q, est in a.items():
            rank = np.searchsorted(values, est, side="right") / len(values)
            low = np.searchsorted(values, est, side="left") / len(values)
            p = float(q.rsplit("_p", 1)[1].replace("_", ".")) / 100
            assert low - eps <= p <= rank + eps, (q, est, p, low, rank)


@pytest.mark.parametrize("name", sorted(TABLE))
@settings(max_examples=40, deadline=None)
@given(
    data=rows,
    cut1=st.integers(min_value=0, max_value=300),
    cut2=st.integers(min_value=0, max_value=300),
)
def test_merge_of_partials_equals_the_whole(name, data, cut1, cut2):
    agg = _agg(name)
    i, j = sorted((min(cut1, len(data)), min(cut2, len(data))))
    parts = [data[:i], data[i:j], data[j:]]
    states = [_roundtrip(agg, _fold(agg, p)) for p in parts]
    left = agg.merge(agg.merge(states[0], states[1]), states[2])
    right = agg.merge(states[0], agg.merge(states[1], states[2]))
    swapped = agg.merge(states[2], agg.merge(states[1], states[0]))
    whole = _fold(agg, data)
    _assert_same(name, agg, left, right, len(data), data)  # associative
    _assert_same(name, agg, left, swapped, len(data), data)  # commutative
    _assert_same(name, agg, left, whole, len(data), data)  # partials == whole


def test_top_k_ranks_by_count_then_item():
    agg = build(AggregationSpec("top_k", "client", "top", {"k": 2}, "string"))
    state = agg.update(
        agg.initialize(), np.array(["b", "a", "b", "c", "a", "d"], dtype=object), np.arange(6)
    )
    assert orjson.loads(agg.result(state)["top"]) == [
        {"item": "a", "count": 2},
        {"item": "b", "count": 2},
    ]


def test_first_and_last_follow_event_time_not_arrival():
    first = build(AggregationSpec("first", "client", "f", {}, "string"))
    last = build(AggregationSpec("last", "client", "l", {}, "string"))
    values = np.array(["late", "early", "middle"], dtype=object)
    times = np.array([30, 10, 20])
    assert first.result(first.update(first.initialize(), values, times))["f"] == "early"
    assert last.result(last.update(last.initialize(), values, times))["l"] == "late"


def test_hll_stays_within_three_sigma_on_many_distinct_values():
    agg = build(AggregationSpec("approx_count_distinct", "client", "n", {"lg_k": 12}, "string"))
    values = np.array([f"s{i}" for i in range(50_000)], dtype=object)
    states = [
        agg.update(agg.initialize(), chunk, np.zeros(len(chunk)))
        for chunk in np.array_split(values, 7)
    ]
    merged = states[0]
    for s in states[1:]:
        merged = agg.merge(merged, _roundtrip(agg, s))
    estimate = agg.result(merged)["n"]
    assert abs(estimate - 50_000) <= 3 * agg.relative_standard_error() * 50_000
