"""The Spark correction of a session view against a pandas oracle, on traffic streamed by real
tasks (late and duplicate events included), for all hours and for one hour in the middle."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

from pipelines.batch import archive_hours, correct_hours
from pipelines.batch.sessions import sessionize
from pipelines.generator import GeneratorOptions
from pipelines.segments import HOUR_MS
from pipelines.serving import query_view
from pipelines.tables import ViewTables
from pipelines.testing import StreamRun, run_stream
from pipelines.views import View, parse_views
from tests.fixtures.tables import local_tables
from tests.pipelines.batch.test_batch_correct import oracle_values

pytestmark = pytest.mark.spark

SESSION_VIEW = {
    "name": "client_sessions",
    "kind": "session",
    "topic": "events",
    "session_key": "client",
    "gap": "10m",
    "max_duration": "40m",
    "allowed_lateness": "2m",
    "kept_fields": ["event_type", "bytes_tx"],
    "max_kept_events": 3,
    "aggregation_info": [
        {"aggregation": "count", "aggregated_col_name": "events"},
        {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
        {"aggregation": "mean", "col_name": "bytes_tx", "aggregated_col_name": "bytes_mean"},
        {"aggregation": "count_distinct", "col_name": "event_type", "aggregated_col_name": "types"},
        {"aggregation": "first", "col_name": "org", "aggregated_col_name": "org"},
        {"aggregation": "last", "col_name": "event_type", "aggregated_col_name": "last_type"},
        {
            "aggregation": "top_k",
            "col_name": "event_type",
            "aggregated_col_name": "top_types",
            "params": {"k": 2},
        },
    ],
}
HOURLY_COUNT = {
    "name": "events_hourly",
    "topic": "events",
    "grouping_cols": [],
    "interval": "1h",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "events"}],
}
OPTIONS = GeneratorOptions(
    max_events=4000,
    speedup=15.0,  # ~3 hours of event time
    late_share=0.05,
    late_delay_mean_s=600.0,  # many later than the allowed lateness
    duplicate_share=0.03,
)


@pytest.fixture(scope="module")
def view() -> View:
    (parsed,) = parse_views([SESSION_VIEW])
    return parsed


@pytest.fixture(scope="module")
def streamed(tmp_path_factory, view) -> StreamRun:
    return run_stream(tmp_path_factory.mktemp("sessions") / "storage", [view], options=OPTIONS)


@pytest.fixture(scope="module")
def tables(streamed, tmp_path_factory) -> ViewTables:
    tables = local_tables(streamed.store.root, tmp_path_factory.mktemp("catalog") / "cat.db")
    yield tables
    tables.close()


@pytest.fixture(scope="module")
def corrected(spark, streamed, view, tables):
    """Every archived hour corrected once (later tests may publish newer, equal versions)."""
    return correct_hours(
        spark, streamed.store, [view], archive_hours(streamed.store), tables=tables
    )


def oracle_sessions(view: View, events: pd.DataFrame) -> dict[tuple, dict]:
    """Exact sessions of the deduplicated events, by a plain loop per key."""
    spec = view.session
    out = {}
    for key, group in events.groupby(spec.key, sort=True):
        group = group.sort_values(["event_time", "event_id"])
        sessions: list[list[int]] = []
        start = last = None
        for i, t in enumerate(group["event_time"].tolist()):
            if start is None or t - last >= spec.gap_ms or t - start >= spec.max_duration_ms:
                sessions.append([])
                start = t
            sessions[-1].append(i)
            last = t
        for rows in sessions:
            part = group.iloc[rows]
            times = part["event_time"].tolist()
            row = {
                "session_end": max(times),
                "event_count": len(part),
                "open": False,
                "kept_events": [
                    {
                        "event_time": int(r.event_time),
                        "event_type": r.event_type,
                        "bytes_tx": int(r.bytes_tx),
                    }
                    for r in part.head(spec.max_kept_events).itertuples()
                ],
                "kept_dropped": max(0, len(part) - spec.max_kept_events),
            }
            for agg in view.aggregators:
                row.update(oracle_values(agg, part))
            out[(key, min(times))] = row
    return out


def _served(view: View, store, tables, start_ms: int, end_ms: int) -> dict[tuple, dict]:
    rows = query_view(store, view, start_ms, end_ms, prefer="batch", tables=tables).to_pylist()
    served = {}
    for row in rows:
        start = int(row.pop("session_start").timestamp() * 1000)
        row["session_end"] = int(row["session_end"].timestamp() * 1000)
        row["kept_events"] = json.loads(row["kept_events"])
        assert row.pop("source").startswith("batch v")
        served[(row.pop(view.session.key), start)] = row
    return served


def _assert_equal(served: dict, expected: dict) -> None:
    assert set(served) == set(expected)
    for key, want in expected.items():
        got = served[key]
        for col, value in want.items():
            if isinstance(value, float):
                assert got[col] == pytest.approx(value, rel=1e-12), (key, col)
            else:
                assert got[col] == value, (key, col)


def test_sessions_follow_gap_and_maximum_duration_in_spark(spark):
    """The cutting rule on known times (minutes), in Spark: gap 10, max 25."""
    (view,) = parse_views([{**SESSION_VIEW, "gap": "10m", "max_duration": "25m"}])
    expected = {  # key: [(minute, session start)]
        # 9 -> 30 and 31 -> 60 break; 87 - 60 >= 25 cuts the last run.
        "a": [
            (0, 0),
            (5, 0),
            (9, 0),
            (30, 30),
            (31, 30),
            (60, 60),
            (69, 60),
            (78, 60),
            (87, 87),
            (96, 87),
        ],
        # one run of 64 minutes cut twice by the maximum; two events tie at 32.
        "b": [
            (0, 0),
            (8, 0),
            (16, 0),
            (24, 0),
            (32, 32),
            (32, 32),
            (40, 32),
            (48, 32),
            (56, 32),
            (64, 64),
        ],
        "c": [(100, 100)],
    }
    rows = [
        (key, minute * 60_000, f"{key}-{i}")
        for key, events in expected.items()
        for i, (minute, _) in enumerate(events)
    ]
    frame = spark.createDataFrame(rows, "client string, event_time long, event_id string")
    got = sorted(
        (r["client"], r["event_time"] // 60_000, r["session_start"] // 60_000)
        for r in sessionize(frame, view).collect()
    )
    want = sorted((k, m, s) for k, events in expected.items() for m, s in events)
    assert got == want


def test_all_hours_equal_the_pandas_oracle(corrected, streamed, view, tables):
    hours = archive_hours(streamed.store)
    results = corrected
    assert [r.segment_start_ms for r in results] == hours and not any(r.skipped for r in results)
    expected = oracle_sessions(view, streamed.events_frame(dedupe=True))
    served = _served(view, streamed.store, tables, 0, 2**62)
    _assert_equal(served, expected)
    assert sum(r.rows for r in results) == len(expected)
    # The correction differs from the stream: late events and duplicates are treated exactly.
    realtime = query_view(streamed.store, view, 0, 2**62, prefer="realtime", tables=tables)
    assert sum(realtime.column("event_count").to_pylist()) != sum(
        v["event_count"] for v in expected.values()
    )


def test_each_hour_alone_reads_around_it(spark, streamed, view, tables):
    """Correcting one hour at a time: sessions that start in it are complete even when they run
    into the next hour (read after it), and those that started before it and run into it are
    neither published in it nor cut short in it (read before it)."""
    hours = archive_hours(streamed.store)
    assert len(hours) >= 2
    oracle = oracle_sessions(view, streamed.events_frame(dedupe=True))
    # Small Arrow batches: keys' sessions run across batches, which must carry them over.
    batch_rows = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(batch_rows)
    spark.conf.set(batch_rows, "37")
    try:
        results = [
            correct_hours(spark, streamed.store, [view], [hour], tables=tables)
            for hour in hours[:2]
        ]
    finally:
        spark.conf.set(batch_rows, previous)
    for hour, (result,) in zip(hours[:2], results, strict=True):
        assert result.segment_start_ms == hour and not result.skipped
        expected = {k: v for k, v in oracle.items() if hour <= k[1] < hour + HOUR_MS}
        crossing_out = [v for v in expected.values() if v["session_end"] >= hour + HOUR_MS]
        crossing_in = [k for k, v in oracle.items() if k[1] < hour <= v["session_end"]]
        assert crossing_out if hour == hours[0] else crossing_in
        served = _served(view, streamed.store, tables, hour, hour + HOUR_MS)
        _assert_equal(served, expected)
    # Beside a windowed view, the session view takes the hour's counts from the windowed
    # views' read (no second cached read): the same counts, the oracle's events.
    (hourly,) = parse_views([HOURLY_COUNT])
    together = correct_hours(spark, streamed.store, [hourly, view], hours[:1], tables=tables)
    (alone,) = results[0]
    (beside,) = [r for r in together if r.view == view.name]
    events = streamed.events_frame(dedupe=True)["event_time"]
    in_hour = int(((events >= hours[0]) & (events < hours[0] + HOUR_MS)).sum())
    assert (beside.events, beside.duplicates_dropped) == (alone.events, alone.duplicates_dropped)
    assert beside.events == in_hour and beside.rows == alone.rows


def test_reconciliation_explains_late_and_duplicate_events_and_catches_lost_sessions(
    corrected, streamed, view, tables
):
    from pipelines.segments import read_parquet, realtime_prefix, to_parquet
    from quality.reconcile import SessionCauses, reconcile, settled_frontier

    hours = archive_hours(streamed.store)
    results = reconcile(streamed.store, [view], hours, tables=tables)
    assert [r.hour_ms for r in results] == hours and all(r.corrected for r in results)
    assert all(r.passed for r in results), [f for r in results for f in r.failures]
    differing = sum(len(r.comparison.missing) + len(r.comparison.extra) for r in results) + sum(
        m.differing for r in results for m in r.metrics
    )
    assert differing > 0  # the data has late and duplicate events: there is something to explain
    assert sum(r.causes.late_dropped for r in results) > 0
    assert any(r.causes.duplicates for r in results)
    count = next(m for m in results[0].metrics if m.column == "event_count")
    assert count.compared > 0 and count.kind == "exact"

    # Lose one realtime session whose span had neither duplicates nor late drops.
    hour = hours[0]
    result = next(r for r in results if r.hour_ms == hour)
    from quality.reconcile.sessions import archive_rows

    causes = SessionCauses(view, archive_rows(streamed.store, view, hour, None))
    key = next(iter(streamed.store.list(realtime_prefix(view.name, hour))))
    table = read_parquet(streamed.store.get(key))
    rows = table.to_pylist()
    victim = next(
        i
        for i, r in enumerate(rows)
        if not causes.of(r["client"], r["session_start"], r["session_end"]).explains_difference
        and not r["open"]
        and r["session_end"] < settled_frontier(streamed.store, view)
    )
    keep = [i for i in range(len(rows)) if i != victim]
    streamed.store.put(key, to_parquet(table.take(keep)))
    (after,) = reconcile(streamed.store, [view], [hour], tables=tables)
    assert not after.passed and result.passed
    assert len(after.comparison.missing) == len(result.comparison.missing) + 1
    assert "session(s) missing or extra" in after.failures[0]

    # And miscount another such session: its event_count is unexplained, and named.
    miscounted = next(
        i
        for i, r in enumerate(rows)
        if i != victim
        and not causes.of(r["client"], r["session_start"], r["session_end"]).explains_difference
        and not r["open"]
        and r["session_end"] < settled_frontier(streamed.store, view)
    )
    rows[miscounted]["event_count"] += 3
    tampered = pa.Table.from_pylist(rows, schema=table.schema)
    streamed.store.put(key, to_parquet(tampered.take(keep)))
    (counted,) = reconcile(streamed.store, [view], [hour], tables=tables)
    metric = next(m for m in counted.metrics if m.column == "event_count")
    assert not metric.passed and metric.unexplained == 1
    (shown,) = metric.samples
    assert shown["key"][0] == rows[miscounted]["client"]
    assert shown["realtime"] - shown["exact"] == 3 and shown["duplicates"] == shown["late"] == 0
