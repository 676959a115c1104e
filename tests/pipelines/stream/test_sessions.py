"""Session views in a stream task: gap and maximum-duration rules in event time, out-of-order
events within the allowed lateness, late events, kept events, bounded memory, and a result that
depends only on the partition's contents (batch cuts, flushes and restarts change nothing)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pytest

from pipelines.config import SluiceSettings
from pipelines.serving import ACTIVE
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import parse_views
from tests.fixtures.oracle import SessionTruth, compare_sessions
from tests.fixtures.tables import query_realtime

MIN = 60_000
T0 = 1_424_988_000_000  # 2015-02-26T22:00Z


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


def _view(**overrides):
    raw = {
        "name": "visits",
        "kind": "session",
        "topic": "events",
        "gap": "30m",
        "max_duration": "2h",
        "allowed_lateness": "20m",
        "kept_fields": ["event_type"],
        "max_kept_events": 3,
        "aggregation_info": [
            {"aggregation": "count", "aggregated_col_name": "events"},
            {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
            {"aggregation": "first", "col_name": "event_type", "aggregated_col_name": "first_type"},
            {"aggregation": "last", "col_name": "event_type", "aggregated_col_name": "last_type"},
        ],
    }
    raw.update(overrides)
    (view,) = parse_views({"views": [raw]})
    return view


def _event(i: int, t: int, session: str = "s1", kind: str = "view", nbytes: int = 1) -> bytes:
    return orjson.dumps(
        {
            "event_id": f"e{i}",
            "event_time": t,
            "org": "o",
            "client": "c",
            "bytes_tx": nbytes,
            "session_id": session,
            "event_type": kind,
        }
    )


def _records(events) -> list[Rec]:
    """``events`` as (minutes after T0, session[, type]) in partition order."""
    out = []
    for i, item in enumerate(events):
        minute, session, *kind = item
        out.append(Rec(i, T0, _event(i, T0 + int(minute * MIN), session, *(kind or ["view"]))))
    return out


def _task(tmp_path, view, name="run"):
    store = LocalObjectStore(tmp_path / name)
    task = StreamTask("events", 0, [view], store, CollectingDeadLetters(), SluiceSettings())
    assert task.restore() is None
    task.start_at(0)
    return task, store


def _sessions(store, view) -> list[dict]:
    rows = query_realtime(store, view).to_pylist()
    return [
        {
            "key": r["session_id"],
            "start": (int(r["session_start"].timestamp() * 1000) - T0) / MIN,
            "end": (int(r["session_end"].timestamp() * 1000) - T0) / MIN,
            "n": r["event_count"],
            "open": r["open"],
        }
        for r in rows
    ]


def test_a_gap_of_at_least_the_inactivity_gap_starts_a_new_session(tmp_path):
    view = _view()
    task, store = _task(tmp_path, view)
    # 29 min after the last event: same session; 30 min: a new one. s2 moves the watermark.
    task.process(_records([(0, "s1"), (29, "s1"), (59, "s1"), (60, "s2"), (200, "s2")]))
    task.flush()
    got = _sessions(store, view)
    assert got == [
        {"key": "s1", "start": 0, "end": 29, "n": 2, "open": False},
        {"key": "s1", "start": 59, "end": 59, "n": 1, "open": False},
        {"key": "s2", "start": 60, "end": 60, "n": 1, "open": False},
    ]
    # The event at 200 min waits: the frontier is 200 - 20 (lateness), so it is not settled.
    assert task.states["visits"].pending_rows == 1


def test_open_sessions_are_marked_open_until_the_watermark_passes_the_gap(tmp_path):
    view = _view()
    task, store = _task(tmp_path, view)
    task.process(_records([(0, "s1"), (10, "s1"), (40, "s2")]))  # frontier 20: s1 open
    task.flush()
    assert _sessions(store, view) == [{"key": "s1", "start": 0, "end": 10, "n": 2, "open": True}]
    task.process([Rec(3, T0, _event(3, T0 + 60 * MIN, "s3"))])
    task.flush()  # frontier 40 >= 10 + 30: s1 closed; s2 (40) not settled yet
    assert _sessions(store, view) == [{"key": "s1", "start": 0, "end": 10, "n": 2, "open": False}]


def test_maximum_duration_cuts_a_busy_session(tmp_path):
    view = _view()  # max_duration 2h
    task, store = _task(tmp_path, view)
    events = [(m, "s1") for m in range(0, 300, 10)] + [(500, "s9")]
    task.process(_records(events))
    task.flush()
    got = [(s["start"], s["end"], s["n"]) for s in _sessions(store, view) if s["key"] == "s1"]
    assert got == [(0, 110, 12), (120, 230, 12), (240, 290, 6)]


def test_out_of_order_events_within_the_lateness_join_their_session(tmp_path):
    view = _view()  # gap 30m, lateness 20m
    task, store = _task(tmp_path, view)
    # 40 arrives before 20: alone they are two sessions (gap 40), with 20 they are one.
    # 5 arrives when the watermark is 40 (35 behind, > 20): late, dropped and counted.
    task.process(_records([(0, "s1"), (40, "s1"), (20, "s1"), (5, "s1"), (200, "s2")]))
    task.flush()
    assert _sessions(store, view) == [{"key": "s1", "start": 0, "end": 40, "n": 3, "open": False}]
    state = task.states["visits"]
    assert (state.late, state.processed) == (1, 4)
    counters = task.view_counters()["visits"]
    assert counters["consumed"] == counters["processed"] + counters["dead_lettered"] + 1


def test_kept_events_are_the_first_in_event_time_and_the_rest_are_counted(tmp_path):
    view = _view()  # max_kept_events 3
    task, store = _task(tmp_path, view)
    kinds = ["click", "view", "upload", "error", "download"]
    events = [(m, "s1", k) for m, k in zip([4, 1, 3, 2, 5], kinds, strict=True)]
    task.process(_records([*events, (100, "s2")]))
    task.flush()
    (row,) = query_realtime(store, view).to_pylist()
    kept = orjson.loads(row["kept_events"])
    assert [k["event_type"] for k in kept] == ["view", "error", "upload"]  # minutes 1, 2, 3
    assert [k["event_time"] for k in kept] == [T0 + m * MIN for m in (1, 2, 3)]
    assert row["kept_dropped"] == 2
    assert (row["first_type"], row["last_type"], row["bytes"]) == ("view", "download", 5.0)


def test_closed_sessions_leave_memory_after_their_final_snapshot(tmp_path):
    view = _view()
    task, store = _task(tmp_path, view)
    task.process(_records([(0, "s1"), (10, "s2"), (70, "s3"), (75, "s5")]))
    state = task.states["visits"]
    state.settle(task.watermark)  # frontier 55 min: s1 and s2 closed, not written yet
    assert state.open_sessions == 0 and len(state.buckets[T0]) == 2
    task.checkpoint()  # their final rows are durable: they leave memory, the hour stays open
    assert state.buckets[T0] == {}
    task.process([Rec(4, T0, _event(4, T0 + 56 * MIN, "s6"))])  # a new session in that hour
    task.process([Rec(5, T0, _event(5, T0 + 100 * MIN, "s7"))])
    task.flush()  # rewrites hour 22:00 from memory (s6) plus its file (s1, s2)
    assert [s["key"] for s in _sessions(store, view)] == ["s1", "s2", "s6", "s3", "s5"]
    task.process([Rec(6, T0, _event(6, T0 + 200 * MIN, "s4"))])
    task.checkpoint()  # frontier 180 min: hour 22:00 is final, its file is durable
    assert T0 not in state.buckets
    assert [s["key"] for s in _sessions(store, view)] == ["s1", "s2", "s6", "s3", "s5", "s7"]


def _random_partition(seed: int, n: int) -> list[Rec]:
    """Sessions of many keys with pauses, bursts and events up to ~25 min out of order."""
    rng = random.Random(seed)
    out, t = [], T0
    for i in range(n):
        t += rng.choice([0, 1_000, 20_000, 60_000, 120_000])
        if rng.random() < 0.01:
            t += 40 * MIN  # a pause that ends every session
        jitter = int(rng.random() ** 3 * 25 * MIN) if rng.random() < 0.2 else 0
        session = f"s{rng.randrange(12)}"
        kind = rng.choice(["view", "click", "download"])
        out.append(Rec(i, t, _event(i, t - jitter, session, kind, rng.randrange(1000))))
    return out


def _run(tmp_path, name, view, records, cuts, crash_after=None):
    task, store = _task(tmp_path, view, name)
    position = 0
    for i, cut in enumerate(cuts):
        task.process(records[position:cut])
        position = cut
        if i % 2:
            task.flush()
        if i % 3 == 2:
            task.checkpoint()
        if crash_after is not None and i == crash_after:
            # A crash: everything since the checkpoint is lost; a new task restores and replays.
            task = StreamTask("events", 0, [view], store, CollectingDeadLetters(), SluiceSettings())
            position = task.restore() or 0
            cuts = [c for c in cuts if c > position]
            return _resume(task, store, records, position, cuts)
    task.flush()
    return store


def _resume(task, store, records, position, cuts):
    for cut in cuts:
        task.process(records[position:cut])
        position = cut
        task.flush()
    return store


@pytest.mark.parametrize("seed", [3, 7])
def test_random_partitions_equal_the_oracle_whatever_the_cuts_and_crashes(tmp_path, seed):
    view = _view(gap="10m", max_duration="1h", allowed_lateness="15m", max_kept_events=4)
    records = _random_partition(seed, 3000)
    truth = SessionTruth(view)
    truth.add_partition(0, [r.value for r in records], 64 * 1024, 6 * 3600_000, settled_only=True)
    expected = truth.sessions()
    assert truth.late > 0 and len(expected) > 50
    rng = random.Random(seed)
    results = []
    for name, crash in (("whole", None), ("cut", None), ("crash", 7)):
        cuts = [] if name == "whole" else sorted(rng.sample(range(1, len(records)), 40))
        cuts.append(len(records))
        store = _run(tmp_path, name, view, records, cuts, crash)
        rows = query_realtime(store, view).to_pylist()
        assert not compare_sessions(view, rows, expected), name
        frontier = truth.frontiers[0]
        for row in rows:
            want = expected[(row["session_id"], int(row["session_start"].timestamp() * 1000))]
            assert row["open"] == (want["deadline"] > frontier)
        results.append(rows)
    assert results[0] == results[1] == results[2]


def test_query_returns_sessions_started_or_active_in_a_range(tmp_path):
    view = _view()
    task, store = _task(tmp_path, view)
    task.process(_records([(0, "a"), (25, "a"), (50, "a"), (40, "b"), (90, "c"), (300, "z")]))
    task.flush()

    def keys(start_min, end_min, match="started"):
        table = query_realtime(store, view, T0 + start_min * MIN, T0 + end_min * MIN, match=match)
        return table.column("session_id").to_pylist()

    assert keys(30, 100) == ["b", "c"]  # a started at 0
    assert keys(30, 100, ACTIVE) == ["a", "b", "c"]  # a ran until 50
    assert keys(51, 100, ACTIVE) == ["c"]


def test_a_checkpoint_without_the_pending_column_still_loads(tmp_path):
    """Checkpoints written before session views have no ``pending`` column: nothing pending."""
    import pyarrow as pa

    from pipelines.segments import checkpoint_key, read_parquet, to_parquet
    from pipelines.stream.checkpoint import load_checkpoint

    view = _view()
    task, store = _task(tmp_path, view)
    task.process(_records([(0, "s1"), (50, "s1")]))
    task.checkpoint()
    key = checkpoint_key("events", 0, 0)
    table = read_parquet(store.get(key))
    assert table.column("pending").to_pylist()[0] is not None  # 50 is not settled yet
    old = table.drop_columns(["pending"]).replace_schema_metadata(table.schema.metadata)
    store.put(key, to_parquet(old))
    checkpoint = load_checkpoint(store, "events", 0)
    assert checkpoint.pending == {} and set(checkpoint.states) == {"visits"}
    assert isinstance(read_parquet(checkpoint.states["visits"]), pa.Table)


def test_folding_in_early_when_many_events_wait_changes_nothing(tmp_path, monkeypatch):
    """Pending events beyond SETTLE_AT_PENDING are folded in before the flush: same sessions."""
    from pipelines.stream import sessions

    view = _view(gap="10m", max_duration="1h", allowed_lateness="15m", max_kept_events=4)
    records = _random_partition(11, 2000)
    truth = SessionTruth(view)
    truth.add_partition(0, [r.value for r in records], 64 * 1024, 6 * 3600_000, settled_only=True)
    monkeypatch.setattr(sessions, "SETTLE_AT_PENDING", 50)
    task, store = _task(tmp_path, view)
    for first in range(0, len(records), 100):
        task.process(records[first : first + 100])
        assert task.states["visits"].pending_rows < 150
    task.flush()
    rows = query_realtime(store, view).to_pylist()
    assert not compare_sessions(view, rows, truth.sessions())


def test_kept_events_are_written_as_orjson_writes_them():
    """The stream writes kept events with msgspec (one C call per session); the Spark
    correction with orjson: the JSON must be the same bytes, whatever the strings hold."""
    import msgspec
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pipelines.stream.sessions import kept_event_type

    kept = kept_event_type(("event_time", "event_type", "bytes_tx"))

    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.integers(-(2**63), 2**63 - 1),
                st.text(min_size=1),
                st.integers(-(2**63), 2**63 - 1),
            ),
            max_size=5,
        )
    )
    def agree(events):
        names = ("event_time", "event_type", "bytes_tx")
        written = msgspec.json.encode([kept(*e) for e in events])
        assert written == orjson.dumps([dict(zip(names, e, strict=True)) for e in events])
        assert msgspec.json.decode(written, type=list[kept]) == [kept(*e) for e in events]

    agree()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_checkpoint_reuses_a_flush_rows_only_while_the_sessions_are_unchanged(tmp_path, seed):
    """The open sessions' rows a checkpoint's flush wrote are reused by its state: whatever
    was processed, flushed or settled before, they equal rows serialized afresh; a flush
    without a checkpoint keeps none of them in memory."""
    view = _view(gap="10m", max_duration="1h", allowed_lateness="15m", max_kept_events=4)
    records = _random_partition(seed, 2000)
    task, _ = _task(tmp_path, view)
    state = task.states["visits"]
    rng = random.Random(seed)
    position, reused_rows = 0, 0
    for cut in [*sorted(rng.sample(range(1, len(records)), 30)), len(records)]:
        task.process(records[position:cut])
        position = cut
        if rng.random() < 0.3:
            task.flush()
            assert not state._open_rows
        if rng.random() < 0.7:
            task.flush(checkpoint=True)  # what checkpoint() does before writing the state
        if rng.random() < 0.3:
            state.settle(task.watermark + rng.choice([0, 5 * MIN]))  # sessions may change
        reused_rows += len(state._open_rows)
        reused = state.all_table()  # from the rows memoised, if any
        assert not state._open_rows
        assert reused.equals(state.all_table())  # all serialized afresh
    assert reused_rows > 0  # the memo was used at all


def test_rows_built_a_column_at_a_time_equal_one_row_per_session(tmp_path):
    """The batch row builder against the per-session row it replaced, on open and closed
    sessions of a random partition (kept events written as orjson writes the dicts)."""
    view = _view(gap="10m", max_duration="1h", allowed_lateness="15m", max_kept_events=4)
    task, _ = _task(tmp_path, view)
    task.process(_random_partition(5, 1500))
    state = task.states["visits"]
    state.settle(task.watermark)
    assert state.open and len(state.open) < sum(map(len, state.buckets.values()))
    for is_open in (True, False):
        pairs = list(state.open.items())
        expected = [
            (
                key,
                s.start,
                s.end,
                s.count,
                is_open,
                orjson.dumps(
                    [
                        dict(zip(state._kept_names, (k.event_time, k.event_type), strict=True))
                        for k in s.kept
                    ]
                ).decode(),
                s.dropped,
                *(agg.serialize(x) for agg, x in zip(state.aggregators, s.states, strict=True)),
            )
            for key, s in pairs
        ]
        assert state._rows_of(pairs, is_open) == expected
    assert state._rows_of([], True) == []
    closed = [
        row
        for bucket in state.buckets.values()
        for row in bucket.values()
        if isinstance(row, tuple)
    ]
    assert closed and all(row[4] is False for row in closed)


@pytest.mark.parametrize("shared_keys", [False, True], ids=["own-keys", "keys-on-two-tasks"])
def test_the_realtime_sessions_table_equals_the_merged_rows(tmp_path, monkeypatch, shared_keys):
    """Two tasks' realtime files read a column at a time give the rows merged one session at
    a time; a session whose key was on both tasks takes the row path (and still agrees)."""
    from pipelines.segments import read_parquet
    from pipelines.serving import sessions as serving
    from pipelines.serving.sources import segment_sources

    view = _view(gap="10m", max_duration="1h", allowed_lateness="15m", max_kept_events=4)
    store = LocalObjectStore(tmp_path / "store")
    for partition, seed in ((0, 3), (1, 4)):
        records = _random_partition(seed, 800)
        if partition and not shared_keys:
            for r in records:
                event = orjson.loads(r.value)
                event["session_id"] = "t" + event["session_id"]
                r.value = orjson.dumps(event)
        task = StreamTask(
            "events", partition, [view], store, CollectingDeadLetters(), SluiceSettings()
        )
        assert task.restore() is None
        task.start_at(0)
        task.process(records)
        task.flush()
    sources = segment_sources(store, view, 0, 2**62)
    assert len(sources) > 1
    schema = serving.realtime_sessions_table(view, []).schema
    row_path = serving.realtime_session_rows
    if not shared_keys:  # every file's sessions are its own: no row is built one by one
        monkeypatch.setattr(serving, "realtime_session_rows", None)
    merged = 0
    for source in sources:
        files = [read_parquet(store.get(key)) for key in source.files]
        expected = pa.Table.from_pylist(row_path(view, files), schema=schema)
        table = serving.realtime_sessions_table(view, files)
        assert table.equals(expected), source.segment
        merged += sum(t.num_rows for t in files) - table.num_rows
    assert (merged > 0) == shared_keys
