"""Every aggregator: merge is associative and commutative, merging partials equals the whole,
and states survive serialization (every state is round-tripped before it is merged)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.aggregators import AggregationSpec, build, get, names
from pipelines.aggregators.base import JsonState, json_values

INT_COL = "bytes_tx"
STR_COL = "client"

WHERE = "bytes_tx >= 300000 and client not in ('c1', 'c2')"
SPLITS = {"split_points": [1000, 250000, 500000, 900000]}

# name -> (column, col kind, params, how results compare[, where])
TABLE = {
    "count": (None, None, {}, "exact"),
    "sum": (INT_COL, "int", {}, "exact"),
    "min": (INT_COL, "int", {}, "exact"),
    "max": (INT_COL, "int", {}, "exact"),
    "mean": (INT_COL, "int", {}, "close"),
    "count_distinct": (STR_COL, "string", {}, "exact"),
    "approx_count_distinct": (STR_COL, "string", {"lg_k": 12}, "exact"),  # registers only
    "quantiles": (INT_COL, "int", {"quantiles": [0.5, 0.95, 0.99]}, "rank"),
    "top_k": (STR_COL, "string", {"k": 3}, "exact"),
    "first": (STR_COL, "string", {}, "exact"),
    "last": (STR_COL, "string", {}, "exact"),
    "variance": (INT_COL, "int", {}, "close"),
    "stddev": (INT_COL, "int", {}, "close"),
    "ratio": (INT_COL, "int", {"denominator": "event_time"}, "close"),
    "count_if": (None, None, {}, "exact", WHERE),
    "sum_if": (INT_COL, "int", {}, "exact", WHERE),
    "any_value": (STR_COL, "string", {}, "exact"),
    "max_by": (STR_COL, "string", {"by": "event_time"}, "exact"),
    "min_by": (INT_COL, "int", {"by": "event_time"}, "exact"),
    "mode": (STR_COL, "string", {}, "exact"),
    "frequent_items": (STR_COL, "string", {"k": 5}, "exact"),
    "hll_bounds": (STR_COL, "string", {"lg_k": 10}, "exact"),
    "theta_distinct": (STR_COL, "string", {"lg_k": 12}, "exact"),
    "theta_bounds": (STR_COL, "string", {"lg_k": 12}, "exact"),
    "cdf": (INT_COL, "int", SPLITS, "cdf"),
    "histogram": (INT_COL, "int", SPLITS, "histogram"),
}
FILTERED = {  # the same aggregations under their own where: (the stream skips other rows)
    "sum": "filtered",
    "quantiles": "filtered",
    "top_k": "filtered",
    "first": "filtered",
    "mode": "filtered",
    "variance": "filtered",
}


def test_every_registered_aggregation_is_in_the_table():
    """Every built-in one (a test may register its own, e.g. tests/fixtures/poison.py)."""
    builtin = [n for n in names() if get(n).__module__.startswith("pipelines.aggregators.")]
    assert sorted(TABLE) == builtin
    assert len(builtin) >= 24


def _agg(name: str, where: str | None = None):
    col, kind, params, _, *own = TABLE[name]
    return build(
        AggregationSpec(name, col, "out", params, kind, where or (own[0] if own else None))
    )


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


def _columns(chunk) -> dict[str, np.ndarray]:
    values, clients, times = _arrays(chunk)
    return {INT_COL: values, STR_COL: clients, "event_time": times}


def _fold(agg, chunk):
    """As the stream's window state does: the aggregation's inputs, only the rows its own
    where: keeps, no update at all when it keeps none."""
    state = agg.initialize()
    if not chunk:
        return state
    columns = _columns(chunk)
    inputs, times = agg.inputs(columns), columns["event_time"]
    rows = agg.rows(columns)
    if rows is not None:
        if not rows.any():
            return state
        inputs = None if inputs is None else inputs[rows]
        times = times[rows]
    return agg.update(state, inputs, times)


def _roundtrip(agg, state):
    return agg.deserialize(agg.serialize(state))


def _result(name: str, agg, state):
    result = agg.result(state)
    return result if len(result) > 1 or name in ("quantiles", "cdf", "histogram") else result["out"]


def _kept_values(agg, whole_chunk) -> np.ndarray:
    columns = _columns(whole_chunk)
    rows = agg.rows(columns)
    return np.sort(columns[INT_COL] if rows is None else columns[INT_COL][rows])


def _assert_same(name: str, agg, left, right, n: int, whole_chunk) -> None:
    how = TABLE[name][3]
    a, b = _result(name, agg, left), _result(name, agg, right)
    eps = 0.02  # k=200 normalized rank error is ~1.65%
    if how == "exact":
        assert a == b
    elif how == "close":
        if a is None or b is None:
            assert a is b
        else:
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    elif how == "hll":
        if isinstance(a, dict):
            a, b = a["out"], b["out"]
        sigma = agg.relative_standard_error() * max(b, 1)
        assert abs(a - b) <= 3 * sigma + 1
    elif how == "rank":
        # KLL: every quantile of the merged sketch is within the sketch's rank error of the truth.
        values = _kept_values(agg, whole_chunk)
        for q, est in a.items():
            if est is None:
                assert not len(values)
                continue
            rank = np.searchsorted(values, est, side="right") / len(values)
            low = np.searchsorted(values, est, side="left") / len(values)
            p = float(q.rsplit("_p", 1)[1].replace("_", ".")) / 100
            assert low - eps <= p <= rank + eps, (q, est, p, low, rank)
    elif how in ("cdf", "histogram"):
        values = _kept_values(agg, whole_chunk)
        exact = _exact_splits(how, values, agg.split_points)
        for (column, estimate), truth in zip(a.items(), exact, strict=True):
            if how == "cdf":
                assert estimate is None if not len(values) else abs(estimate - truth) <= eps
            else:
                assert abs(estimate - truth) <= eps * max(len(values), 1) + 1, (column, a, exact)


def _exact_splits(how: str, values: np.ndarray, points: list[float]) -> list[float]:
    at_or_below = [int(np.searchsorted(values, p, side="right")) for p in points]
    if how == "cdf":
        return [k / len(values) if len(values) else None for k in at_or_below]
    edges = [0, *at_or_below, len(values)]
    return [b - a for a, b in itertools.pairwise(edges)]


CASES = [(name, None) for name in sorted(TABLE)] + [(name, WHERE) for name in sorted(FILTERED)]


@pytest.mark.parametrize(("name", "where"), CASES)
@settings(max_examples=40, deadline=None)
@given(
    data=rows,
    cut1=st.integers(min_value=0, max_value=300),
    cut2=st.integers(min_value=0, max_value=300),
)
def test_merge_of_partials_equals_the_whole(name, where, data, cut1, cut2):
    agg = _agg(name, where)
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
    _assert_same(name, agg, _roundtrip(agg, whole), whole, len(data), data)  # round trip


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


def test_theta_states_of_two_views_intersect_and_subtract():
    """Sessions seen in both views, in one but not the other, and in either: from the two
    serialized states (exact while each sketch holds fewer than k values, within bounds after)."""
    from pipelines.aggregators import theta_set_operation

    agg = build(AggregationSpec("theta_distinct", "session_id", "s", {"lg_k": 12}, "string"))
    left = np.array([f"s{i}" for i in range(0, 3000)], dtype=object)
    right = np.array([f"s{i}" for i in range(2000, 4500)], dtype=object)
    a = agg.serialize(agg.update(agg.initialize(), left, np.zeros(len(left))))
    b = agg.serialize(agg.update(agg.initialize(), right, np.zeros(len(right))))
    assert theta_set_operation("intersection", a, b)["estimate"] == 1000
    assert theta_set_operation("difference", a, b)["estimate"] == 2000
    either = theta_set_operation("union", a, b)  # 4500 > k: estimated
    assert either["lower"] <= 4500 <= either["upper"]
    big = np.array([f"u{i}" for i in range(50_000)], dtype=object)
    half = agg.serialize(agg.update(agg.initialize(), big[:30_000], np.zeros(30_000)))
    rest = agg.serialize(agg.update(agg.initialize(), big[20_000:], np.zeros(30_000)))
    both = theta_set_operation("intersection", half, rest)
    assert both["lower"] <= 10_000 <= both["upper"]
    with pytest.raises(ValueError, match="unknown theta operation"):
        theta_set_operation("xor", a, b)


# --- batch updates (update_groups) agree with one update per group --------------------------


@pytest.mark.parametrize(("name", "where"), CASES)
@settings(max_examples=25, deadline=None)
@given(
    data=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10**6),
            st.integers(min_value=0, max_value=40),
            st.integers(min_value=0, max_value=50),  # few times: ties for first, last, max_by
            st.integers(min_value=0, max_value=12),  # group
        ),
        min_size=1,
        max_size=300,
    ),
    primed=st.booleans(),
)
def test_batch_update_of_every_group_equals_one_update_per_group(name, where, data, primed):
    """The window state's path (rows sorted by group, the aggregation's where: applied,
    groups it keeps no row of left alone) against the reference, one ``update`` per group,
    from empty states or from states that already hold a batch."""
    agg = _agg(name, where)
    data = sorted(data, key=lambda r: r[3])  # stable: each group's rows in arrival order
    columns = _columns([r[:3] for r in data])
    groups = np.array([r[3] for r in data])
    values, times = agg.inputs(columns), columns["event_time"]
    keep = agg.rows(columns)
    if keep is not None:
        values = None if values is None else values[keep]
        times, groups = times[keep], groups[keep]
    firsts = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1])))[: len(groups)]
    bounds = np.append(firsts, len(groups))

    prior = [r[:3] for r in data[::3]] if primed else []

    def start() -> list:
        return [_fold(agg, prior) for _ in firsts]

    batch, each = start(), start()
    agg.update_groups(batch, values, times, bounds)
    agg.update_each(each, values, times, bounds)
    for g, (a, b) in enumerate(zip(batch, each, strict=True)):
        if TABLE[name][3] in ("rank", "cdf", "histogram"):  # KLL compacts at random
            rows = prior + [r[:3] for r in data if r[3] == groups[firsts[g]]]
            _assert_same(name, agg, a, b, len(rows), rows)
            assert a.n == b.n
        else:
            assert agg.serialize(a) == agg.serialize(b)


@pytest.mark.parametrize("name", sorted(TABLE))
@settings(max_examples=15, deadline=None)
@given(data=st.lists(rows, min_size=1, max_size=6))
def test_a_column_of_states_reads_as_each_state_alone(name, data):
    """Serving reads a segment's states a column at a time (one parse for JSON states): the
    same states as reading each blob, and blobs one parse cannot split are read one by one."""
    agg = _agg(name)
    blobs = [agg.serialize(_fold(agg, chunk)) for chunk in data]
    many = agg.deserialize_many(blobs)
    assert len(many) == len(blobs)
    for chunk, blob, state in zip(data, blobs, many, strict=True):
        _assert_same(name, agg, state, agg.deserialize(blob), len(chunk), chunk)
    if isinstance(agg, JsonState):
        assert [agg.serialize(state) for state in many] == blobs
        assert json_values(blobs) == [orjson.loads(b) for b in blobs]
        assert json_values([*blobs, b"1,2"]) is None  # two values in one blob
        assert json_values([*blobs, b""]) is None
