"""Spark frame helpers: a null grouping value is a group like any other."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from pipelines import aggregators
from pipelines.aggregators import AggregationSpec
from pipelines.batch.frames import join_on_keys

pytestmark = pytest.mark.spark


def test_a_null_group_keeps_its_top_k(spark):
    """top_k is computed in a second frame joined back on the keys; the null org's row must
    survive that join (with ``=`` it matched nothing and the group vanished)."""
    rows = [("acme", "GET"), ("acme", "GET"), ("acme", "PUT"), (None, "PUT"), (None, "PUT")]
    events = spark.createDataFrame(rows, "org string, event_type string")
    top = aggregators.build(
        AggregationSpec("top_k", "event_type", "top_types", {"k": 1}, col_kind="string")
    )
    keys = ["org"]
    counts = events.groupBy(*keys).agg(F.count(F.lit(1)).alias("events"))
    joined = join_on_keys(counts, top.spark_frame(events, keys), keys)
    got = {r["org"]: (r["events"], json.loads(r["top_types"])) for r in joined.collect()}
    assert got == {
        "acme": (3, [{"item": "GET", "count": 2}]),
        None: (2, [{"item": "PUT", "count": 2}]),
    }
    assert joined.columns == ["org", "events", "top_types"]
