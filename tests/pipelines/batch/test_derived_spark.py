"""Derived columns in Spark: the correction's compilation of an expression equals the stream's
numpy evaluation and a plain-Python reference on random rows with nulls; and a view grouped,
filtered and aggregated by derived columns serves, streamed and then corrected, what a
plain-Python oracle computes from the generated messages (a session view's correction, filtered
by them, holds the oracle's events and bytes)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.batch import archive_hours, correct_hours
from pipelines.events.declaration import ColumnType
from pipelines.expressions.derived import parse_derived
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import HOUR_MS
from pipelines.serving import query_view
from pipelines.testing import run_stream
from pipelines.views import WINDOW_START, parse_views
from tests.fixtures.expressions import COLUMNS, LETTERS, NULLABLE, expressions, rows, stream_values
from tests.fixtures.tables import local_tables

pytestmark = pytest.mark.spark

_SPARK_TYPES = {
    ColumnType.STRING: "string",
    ColumnType.LONG: "bigint",
    ColumnType.DOUBLE: "double",
    ColumnType.TIMESTAMP: "bigint",
    ColumnType.BOOLEAN: "boolean",
}
_SCHEMA = ", ".join(f"{name} {_SPARK_TYPES[kind]}" for name, kind in COLUMNS.items())


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.sampled_from(list(ColumnType)).flatmap(lambda k: expressions(k, 3, LETTERS)),
        min_size=6,
        max_size=10,
    ),
    rows(LETTERS, 40),
)
def test_spark_equals_the_stream_and_the_reference(spark, batch, data) -> None:
    frame = spark.createDataFrame([tuple(row.values()) for row in data], _SCHEMA)
    parsed = [parse_derived(f"x{i}", text, COLUMNS, NULLABLE) for i, (text, _) in enumerate(batch)]
    got = frame.select(*(p.spark().alias(p.name) for p in parsed)).collect()
    for i, (text, reference) in enumerate(batch):
        expected = [reference(row) for row in data]
        assert [row[i] for row in got] == expected, text
        assert stream_values(text, data)[0] == expected, text


# --- a view over derived columns, streamed and corrected -----------------------------------------

OPTIONS = GeneratorOptions(
    max_events=3000,
    speedup=15.0,  # about two hours of event time
    late_share=0.0,  # every event counts in the stream too: both equal one oracle
    duplicate_share=0.0,
    malformed_share=0.0,
)
TRACE = "Twitter_volume_AAPL"
GENERATOR_FIELDS = [
    {"name": "event_id", "type": "string"},
    {"name": "org", "type": "string"},
    {"name": "client", "type": "string"},
    {"name": "bytes_tx", "type": "long", "minimum": 0},
    {"name": "session_id", "type": "string"},
    {"name": "event_type", "type": "string"},
]
DOCUMENT = {
    "topics": [
        {
            "topic": "events",
            "id": "event_id",
            "fields": GENERATOR_FIELDS,
            "derived": [
                {"name": "org_uc", "expr": "upper(org)"},
                {"name": "hour_of_day", "expr": "hour(event_time)"},
                {"name": "day", "expr": "weekday(event_time)"},
                {"name": "kind", "expr": "coalesce(lower(event_type), 'none')"},
                {"name": "size", "expr": "abs(bytes_tx)"},
            ],
        }
    ],
    "views": [
        {
            "name": "by_derived",
            "topic": "events",
            "grouping_cols": ["org_uc", "kind"],
            "interval": "1h",
            "where": "day >= 1 and kind != 'view' and hour_of_day >= 0",
            "aggregation_info": [
                {"aggregation": "count", "aggregated_col_name": "n"},
                {"aggregation": "sum", "col_name": "size", "aggregated_col_name": "bytes"},
                {"aggregation": "max", "col_name": "hour_of_day", "aggregated_col_name": "hour"},
                {"aggregation": "min", "col_name": "day", "aggregated_col_name": "day"},
            ],
        },
        {
            "name": "sessions_derived",
            "kind": "session",
            "topic": "events",
            "session_key": "session_id",
            "gap": "5m",
            "max_duration": "1h",
            "where": "kind != 'view'",
            "aggregation_info": [
                {"aggregation": "count", "aggregated_col_name": "events"},
                # (the stream's session state holds the generator's columns only, yet)
                {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
            ],
        },
    ],
}


def _oracle() -> dict[tuple, dict]:
    """The view's rows from the generated messages: plain Python, ``datetime`` and ``str``."""
    out: dict[tuple, dict] = defaultdict(lambda: {"n": 0, "bytes": 0, "hour": -1, "day": 8})
    for message in synthesize(load_trace(TRACE), OPTIONS):
        event = orjson.loads(message.value)
        kind = event["event_type"].lower()
        if kind == "view":
            continue
        when = datetime.fromtimestamp(event["event_time"] / 1000, UTC)
        window = event["event_time"] - event["event_time"] % HOUR_MS
        row = out[(window, event["org"].upper(), kind)]
        row["n"] += 1
        row["bytes"] += abs(event["bytes_tx"])
        row["hour"] = max(row["hour"], when.hour)
        row["day"] = min(row["day"], when.isoweekday())
    return dict(out)


def _served(table) -> dict[tuple, dict]:
    served = {}
    for row in table.to_pylist():
        key = (int(row[WINDOW_START].timestamp() * 1000), row["org_uc"], row["kind"])
        served[key] = {name: row[name] for name in ("n", "bytes", "hour", "day")}
    return served


def test_a_view_over_derived_columns_streams_and_corrects_to_the_oracle(spark, tmp_path) -> None:
    views = parse_views(DOCUMENT)
    run = run_stream(tmp_path / "storage", views, options=OPTIONS, trace=TRACE)
    expected = _oracle()
    assert len({key[2] for key in expected}) > 1 and len(expected) > 4
    view, sessions = views
    hours = run.event_hours()
    start, end = hours[0], hours[-1] + HOUR_MS
    with local_tables(run.store.root, tmp_path / "catalog.db") as tables:
        realtime = query_view(run.store, view, start, end, "realtime", tables=tables)
        assert _served(realtime) == expected
        results = correct_hours(spark, run.store, views, archive_hours(run.store), tables=tables)
        assert results and all(r.version == 1 for r in results)
        batch = query_view(run.store, view, start, end, "batch", tables=tables)
        assert _served(batch) == expected
        # the session correction filters by derived columns too
        corrected = query_view(run.store, sessions, start, end, "batch", tables=tables)
        rows = corrected.to_pylist()
        assert sum(r["events"] for r in rows) == sum(r["n"] for r in expected.values())
        assert sum(r["bytes"] for r in rows) == sum(r["bytes"] for r in expected.values())
