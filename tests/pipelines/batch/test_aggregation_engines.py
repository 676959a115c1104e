"""The stream's aggregators and their Spark expressions agree on random events: exactly for
exact types, within the sketch's bound for sketches. One Spark job for every type (and the
same types under a where:), so the whole table costs one aggregation."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from pipelines.aggregators import AggregationSpec, get, names
from pipelines.events.decode import NO_WATERMARK, DecodedBatch
from pipelines.segments import state_column
from pipelines.stream.state import WindowState
from pipelines.views.model import WINDOW_START, View

WHERE = "bytes_tx >= 2000 and client not in ('c1', 'c2')"
SPLITS = {"split_points": [100, 1500, 4000, 9000]}
INT, STR = "bytes_tx", "client"
# (aggregation, column, kind, params, how the engines compare)
AGGREGATIONS = [
    ("count", None, None, {}, "exact"),
    ("sum", INT, "int", {}, "exact"),
    ("min", INT, "int", {}, "exact"),
    ("max", INT, "int", {}, "exact"),
    ("mean", INT, "int", {}, "close"),
    ("count_distinct", STR, "string", {}, "exact"),
    ("approx_count_distinct", "event_id", "string", {"lg_k": 10}, "hll"),
    ("quantiles", INT, "int", {"quantiles": [0.5, 0.9]}, "rank"),
    ("top_k", STR, "string", {"k": 3}, "exact"),
    ("first", STR, "string", {}, "exact"),
    ("last", STR, "string", {}, "exact"),
    ("variance", INT, "int", {}, "close"),
    ("stddev", INT, "int", {}, "close"),
    ("ratio", INT, "int", {"denominator": "event_time"}, "close"),
    ("count_if", None, None, {}, "exact"),
    ("sum_if", INT, "int", {}, "exact"),
    ("any_value", STR, "string", {}, "exact"),
    ("max_by", STR, "string", {"by": INT}, "exact"),
    ("min_by", INT, "int", {"by": "event_time"}, "exact"),
    ("mode", STR, "string", {}, "exact"),
    ("frequent_items", STR, "string", {"k": 4}, "exact"),
    ("hll_bounds", "event_id", "string", {"lg_k": 10, "std_devs": 3}, "bounds"),
    ("theta_distinct", "event_id", "string", {"lg_k": 10}, "theta"),
    ("theta_bounds", "event_id", "string", {"lg_k": 10, "std_devs": 3}, "bounds"),
    ("cdf", INT, "int", SPLITS, "cdf"),
    ("histogram", INT, "int", SPLITS, "histogram"),
]
FILTERED = {"sum", "count_distinct", "quantiles", "top_k", "first", "mode", "max_by", "cdf"}
EPS = 0.02  # KLL k=200: normalized rank error ~1.65%


def _specs() -> list[tuple[AggregationSpec, str]]:
    specs = []
    for name, col, kind, params, how in AGGREGATIONS:
        own = WHERE if name in ("count_if", "sum_if") else None
        specs.append((AggregationSpec(name, col, name, params, kind, own), how))
        if name in FILTERED:
            specs.append((AggregationSpec(name, col, f"{name}_w", params, kind, WHERE), how))
    return specs


def _events(seed: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "event_id": np.array([f"e{i}" for i in rng.integers(0, 6000, n)], dtype=object),
        "event_time": np.sort(rng.integers(0, 7_200_000, n)).astype(np.int64),
        "org": np.array([f"o{i}" for i in rng.integers(0, 3, n)], dtype=object),
        "client": np.array([f"c{i}" for i in rng.zipf(1.6, n) % 40], dtype=object),
        "bytes_tx": rng.integers(0, 10_000, n).astype(np.int64),
    }


def _stream(view: View, events: dict[str, np.ndarray]) -> dict[tuple, dict]:
    """Results as a task computes them: three batches, states round-tripped and merged."""
    state = WindowState(view)
    n = len(events["event_time"])
    for part in np.array_split(np.arange(n), 3):
        columns = {c: v[part] for c, v in events.items()}
        batch = DecodedBatch(
            offsets=part,
            kafka_timestamps=part,
            columns=columns,
            prior_watermark=np.full(len(part), NO_WATERMARK),
        )
        state.update(batch)
    restored = WindowState(view)  # through a checkpoint: every state serialized and back
    restored.load(state.all_table())
    state = restored
    results = {}
    for bucket in state.buckets.values():
        for key, states in bucket.items():
            row = {}
            for agg, s in zip(view.aggregators, states, strict=True):
                row.update(agg.result(s))
            results[(key[0], *key[1:])] = row
    return results


def _spark(spark, view: View, events: dict[str, np.ndarray]) -> dict[tuple, dict]:
    """Results as the correction computes them (its own aggregation of a segment)."""
    from pipelines.batch.windows import aggregate_window_views

    frame = spark.createDataFrame(pa.table(events).to_pandas()).withColumn("topic", F.lit("events"))
    (table,) = aggregate_window_views(frame, [view], [0, 3_600_000])
    return {(r[WINDOW_START], r["org"]): r for r in table.to_pylist()}


def _rank_ok(values: np.ndarray, estimate: float, q: float) -> bool:
    low = np.searchsorted(values, estimate, side="left") / len(values)
    high = np.searchsorted(values, estimate, side="right") / len(values)
    return low - EPS <= q <= high + EPS


def _check(spec: AggregationSpec, how: str, agg, got: dict, want: dict, kept: np.ndarray) -> None:
    for field in agg.output_fields():
        column = field.name
        a, b = got[column], want[column]
        where = (spec.aggregation, spec.where, column, a, b)
        if how == "exact" and isinstance(a, str) and a.startswith("["):
            assert orjson.loads(a) == orjson.loads(b), where
        elif how == "exact":
            assert a == b or (a is not None and b is not None and math.isclose(a, b)), where
        elif how == "close":
            assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-9), where
        elif how in ("hll", "theta", "bounds"):
            rse = 1.04 / 2**5 if spec.aggregation != "theta_distinct" else 1 / 2**5
            if column.endswith("_lower"):
                assert a <= b, where
            elif column.endswith("_upper"):
                assert a >= b, where
            else:
                assert abs(a - b) <= 3 * rse * b + 1, where
        elif how == "rank":
            q = float(column.rsplit("_p", 1)[1]) / 100
            assert (a is None and not len(kept)) or _rank_ok(kept, a, q), where
        elif how == "cdf":
            assert (a is None and b is None) or abs(a - b) <= EPS, where
        elif how == "histogram":
            assert abs(a - b) <= EPS * len(kept) + 1, where


@pytest.mark.parametrize("seed", [7])
def test_stream_and_spark_agree_on_every_aggregation(spark, seed):
    specs = _specs()
    view = View("all", "events", ("org",), 3_600_000, 60_000, tuple(s for s, _ in specs))
    events = _events(seed, 9000)
    stream, batch = _stream(view, events), _spark(spark, view, events)
    assert set(stream) == set(batch)
    for key, got in stream.items():
        in_group = (events["event_time"] - events["event_time"] % 3_600_000 == key[0]) & (
            events["org"] == key[1]
        )
        for agg, (spec, how) in zip(view.aggregators, specs, strict=True):
            rows = in_group if agg.where is None else in_group & agg.where.mask(events)
            kept = np.sort(events["bytes_tx"][rows])
            _check(spec, how, agg, got, batch[key], kept)
            state = batch[key].get(state_column(agg.out))
            if state is None:  # Spark cannot build it (mode, top_k, frequent_items)
                assert agg.spark_state(F.col("event_time")) is None, spec
                continue
            # The correction's state, in the stream's format: its result is within the same
            # bound of the exact value, and HLL and theta reproduce the stream's estimate.
            from_state = agg.result(agg.deserialize(state))
            _check(spec, how, agg, from_state, batch[key], kept)
            if how in ("exact", "hll", "theta", "bounds"):
                assert from_state == {f.name: got[f.name] for f in agg.output_fields()}, spec


def test_every_built_in_aggregation_is_checked_across_engines():
    built_in = {n for n in names() if get(n).__module__.startswith("pipelines.aggregators.")}
    assert {a[0] for a in AGGREGATIONS} == built_in


def random_filter(rng: np.random.Generator, depth: int = 0) -> str:
    """A random where: over org, client (with nulls) and bytes_tx."""
    if depth < 3 and rng.random() < 0.5:
        kind = rng.integers(0, 3)
        if kind == 2:
            return f"not ({random_filter(rng, depth + 1)})"
        op = "and" if kind == 0 else "or"
        return f"({random_filter(rng, depth + 1)} {op} {random_filter(rng, depth + 1)})"
    field = ["org", "client", "bytes_tx"][rng.integers(0, 3)]
    value = (
        (lambda: str(rng.integers(0, 7)))
        if field == "bytes_tx"
        else (lambda: f"'{'abc'[rng.integers(0, 3)]}'")
    )
    test = rng.integers(0, 4)
    if test == 0:
        return f"{field} {['=', '!=', '<', '<=', '>', '>='][rng.integers(0, 6)]} {value()}"
    if test == 1:
        return f"{field} {'not ' if rng.random() < 0.5 else ''}in ({value()}, {value()})"
    return f"{field} is {'not ' if test == 3 else ''}null"


def test_stream_and_spark_filters_agree_on_random_events(spark):
    """Sixty random filters, one Spark job: each a column of one select (nulls included)."""
    from pipelines.expressions import parse_filter

    rng = np.random.default_rng(3)
    filters = [parse_filter(random_filter(rng)) for _ in range(60)]
    pick = np.array(["a", "b", "c", None], dtype=object)
    events = {
        "org": pick[rng.integers(0, 3, 300)],
        "client": pick[rng.integers(0, 4, 300)],
        "bytes_tx": rng.integers(0, 7, 300).astype(np.int64),
        "row": np.arange(300),
    }
    frame = spark.createDataFrame(pa.table(events).to_pandas().astype({"bytes_tx": "int64"}))
    tested = [F.coalesce(f.spark(), F.lit(False)).alias(f"f{i}") for i, f in enumerate(filters)]
    rows = sorted(frame.select("row", *tested).collect(), key=lambda r: r["row"])
    for i, f in enumerate(filters):
        assert [r[f"f{i}"] for r in rows] == f.mask(events).tolist(), f.text


def _sliding_stream(view: View, events: dict[str, np.ndarray]) -> dict[tuple, dict]:
    """Windows as a task writes them: panes folded per batch, windows built per segment."""
    state = WindowState(view)
    n = len(events["event_time"])
    for part in np.array_split(np.arange(n), 4):
        columns = {c: v[part] for c, v in events.items()}
        state.update(DecodedBatch(part, part, columns, np.full(len(part), NO_WATERMARK)))
    rows = {}
    for segment in sorted(state.dirty):
        for row in state.segment_table(segment).to_pylist():
            key = (row[WINDOW_START], row["org"])
            assert key not in rows, "a window is written by one segment only"
            result = {}
            for agg in view.aggregators:
                result.update(agg.result(agg.deserialize(row[state_column(agg.out)])))
            rows[key] = result
    return rows


def test_sliding_windows_agree_with_spark_and_with_brute_force(spark):
    """1h windows every 15m: the stream's pane merges, the correction's exploded windows
    (the real batch code, pipelines.batch.windows.aggregate_window_views) and a brute force
    over the events give the same windows and values."""
    from pipelines.batch.windows import aggregate_window_views

    specs = (
        AggregationSpec("count", None, "n", {}),
        AggregationSpec("sum", INT, "bytes", {}, "int"),
        AggregationSpec("count_distinct", STR, "clients", {}, "string"),
        AggregationSpec("mode", STR, "top_client", {}, "string", WHERE),
        AggregationSpec("max_by", STR, "biggest", {"by": INT}, "string"),
    )
    view = View(
        "sliding",
        "events",
        ("org",),
        3_600_000,
        60_000,
        specs,
        slide_ms=900_000,
        where="client != 'c3'",
    )
    events = _events(11, 3000)
    stream = _sliding_stream(view, events)
    frame = spark.createDataFrame(pa.table(events).to_pandas())
    frame = frame.withColumn("topic", F.lit("events"))
    segments = sorted({view.segment_start(w) for w, _ in stream})
    (table,) = aggregate_window_views(frame, [view], segments)
    batch = {(r[WINDOW_START], r["org"]): r for r in table.to_pylist()}
    assert set(stream) == set(batch)
    kept = view.filter.mask(events)
    for (start, org), got in stream.items():
        inside = (events["event_time"] >= start) & (events["event_time"] < start + 3_600_000)
        rows = inside & (events["org"] == org) & kept
        assert got["n"] == batch[(start, org)]["n"] == int(rows.sum())
        assert got["bytes"] == batch[(start, org)]["bytes"] == float(events[INT][rows].sum())
        for column in ("clients", "top_client", "biggest"):
            assert got[column] == batch[(start, org)][column], (start, org, column)
    starts = sorted({w for w, _ in stream})
    assert starts[1] - starts[0] == 900_000 and len(starts) == 4 * 2 + 3  # 2h of events
