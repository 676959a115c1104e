"""Nulls, SQL's rules, in the correction: the real batch aggregation
(:func:`pipelines.batch.windows.aggregate_window_views`) over a Spark frame of events with
nulls in every nullable column gives what SQL does (:func:`tests.fixtures.nulls.reference`)
and what the stream gives, groups included (a null grouping value its own group, a boolean's
group named ``true``/``false`` by both); the states Spark builds give the same results."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.sql import functions as F

from pipelines.batch.windows import aggregate_window_views
from pipelines.segments import state_column
from pipelines.stream.state import WindowState
from pipelines.views import parse_views
from pipelines.views.model import WINDOW_START
from tests.fixtures.nulls import (
    AGGREGATIONS,
    COLUMNS,
    HOUR,
    T0,
    batch_of,
    group_label,
    random_rows,
    reference,
    same,
    view_document,
)

_SPARK_TYPES = {
    "string": "string",
    "long": "bigint",
    "double": "double",
    "boolean": "boolean",
    "timestamp": "bigint",
}


def _stream(view, rows: list[dict]) -> dict[tuple, dict]:
    state = WindowState(view)
    for part in np.array_split(np.arange(len(rows)), 2):
        state.update(batch_of([rows[i] for i in part]))
    results = {}
    for bucket in state.buckets.values():
        for key, states in bucket.items():
            row: dict = {}
            for agg, s in zip(view.aggregators, states, strict=True):
                row.update(agg.result(s))
            results[key] = row
    return results


@pytest.mark.parametrize("grouping", [("shop",), ("refunded", "tier")])
def test_spark_gives_what_sql_and_the_stream_give_over_nulls(spark, grouping: tuple) -> None:
    (view,) = parse_views(view_document(grouping=grouping))
    rows = random_rows(11, 700)
    ddl = ", ".join(["event_time bigint", *(f"{n} {_SPARK_TYPES[k]}" for n, k in COLUMNS.items())])
    names = ["event_time", *COLUMNS]
    frame = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], ddl)
    frame = frame.withColumn("topic", F.lit("payments"))
    (table,) = aggregate_window_views(frame, [view], [T0, T0 + HOUR])
    corrected = {(r[WINDOW_START], *(r[c] for c in grouping)): r for r in table.to_pylist()}
    stream = _stream(view, rows)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (
            row["event_time"] - row["event_time"] % HOUR,
            *(group_label(row[c]) for c in grouping),
        )
        groups.setdefault(key, []).append(row)
    assert set(corrected) == set(groups) == set(stream)
    assert any(None in key for key in groups)
    for key, members in groups.items():
        for i, (case, agg) in enumerate(zip(AGGREGATIONS, view.aggregators, strict=True)):
            want = reference(case, members, f"a{i}")
            for column, value in want.items():
                got = corrected[key][column]
                assert same(case, value, got), ("spark", key, case, column, value, got)
            blob = corrected[key][state_column(agg.out)]
            if blob is None or not agg.description.reconciled.exact:
                continue  # no Spark state (mode, top_k), or a sketch held to a bound
            from_state = agg.result(agg.deserialize(blob))
            for column, value in want.items():
                assert same(case, value, from_state[column]), ("state", key, case, column)
                assert same(case, stream[key][column], from_state[column]), (key, case)


def test_a_double_groups_alike_in_the_stream_and_in_spark(spark) -> None:
    """Grouped by a nullable double: the stream's group keys are the correction's (the same
    text of each double, a null group), and so are the values of every group."""
    (view,) = parse_views(view_document(grouping=("amount",)))
    rows = random_rows(12, 300)
    for i, row in enumerate(rows):  # few distinct amounts, whole and fractional
        row["amount"] = None if row["amount"] is None else [100.0, 0.5, 1e16, 7.25][i % 4]
    ddl = ", ".join(["event_time bigint", *(f"{n} {_SPARK_TYPES[k]}" for n, k in COLUMNS.items())])
    names = ["event_time", *COLUMNS]
    frame = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], ddl)
    frame = frame.withColumn("topic", F.lit("payments"))
    (table,) = aggregate_window_views(frame, [view], [T0, T0 + HOUR])
    corrected = {(r[WINDOW_START], r["amount"]): r for r in table.to_pylist()}
    stream = _stream(view, rows)
    assert set(stream) == set(corrected)
    assert {k[1] for k in stream} == {None, "100", "0.5", "1e+16", "7.25"}
    for key, values in stream.items():
        for i, case in enumerate(AGGREGATIONS):
            for column, value in values.items():
                if column == f"a{i}" or column.startswith(f"a{i}_"):
                    assert same(case, value, corrected[key][column]), (key, case, column)
