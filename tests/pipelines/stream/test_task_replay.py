"""A task's output is a function of its partition's contents: batch cuts, restarts and replays
after a crash all give identical segments."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow.parquet as pq
import pytest

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.storage import LocalObjectStore
from pipelines.stream.checkpoint import load_checkpoint
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views
from tests.fixtures.tables import query_realtime


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


def _sent(sink: CollectingDeadLetters) -> set[tuple[int, int, str]]:
    return {(partition, letter.offset, letter.reason) for _, partition, letter in sink.letters}


@pytest.fixture(scope="module")
def records():
    options = GeneratorOptions(max_events=6_000, peak_rate=20_000, speedup=60, warmup_events=500)
    messages = synthesize(load_trace("nyc_taxi"), options)
    return [Rec(i, 1_000 + i, m.value) for i, m in enumerate(messages)]


@pytest.fixture(scope="module")
def views():
    return load_views(PROJECT_ROOT / "data" / "views.yaml")


def _segments(store: LocalObjectStore) -> dict[str, list]:
    out = {}
    for key in store.list("segments/"):
        table = pq.read_table(io.BytesIO(store.get(key)))
        out[key] = sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))
    return out


def _query_all(store, views):
    """Every view's rows, minus KLL quantile columns.

    DataSketches' KLL compacts with random coin flips, so a replay reproduces quantiles within
    the sketch's rank error rather than bit for bit; their accuracy is checked against an
    oracle elsewhere. Everything else must match exactly.
    """
    result = {}
    for view in views:
        sketched = {
            f.name for a in view.aggregators if a.name == "quantiles" for f in a.output_fields()
        }
        rows = query_realtime(store, view).to_pylist()
        result[view.name] = [{k: v for k, v in r.items() if k not in sketched} for r in rows]
    return result


def _run(tmp_path, name, views, records, cuts, crash_at=None):
    store = LocalObjectStore(tmp_path / name)
    settings = SluiceSettings(state_dir=tmp_path / name)
    sink = CollectingDeadLetters()
    task = StreamTask("events", 0, views, store, sink, settings)
    assert task.restore() is None
    task.start_at(0)
    position = 0
    for i, cut in enumerate(cuts):
        task.process(records[position:cut])
        position = cut
        if i % 3 == 2:
            task.checkpoint()
        elif i % 3 == 1:
            task.flush()
        if crash_at is not None and i == crash_at:
            # Crash: the in-memory task is lost; a new one restores the last checkpoint and
            # replays from its offset.
            task = StreamTask("events", 0, views, store, sink, settings)
            position = task.restore() or 0
    task.process(records[position:])
    task.checkpoint()
    return store, task, sink


def test_batch_cuts_do_not_change_results(tmp_path, views, records):
    coarse = list(range(3000, len(records), 3000))
    fine = list(range(500, len(records), 500))
    a, task_a, _ = _run(tmp_path, "coarse", views, records, coarse)
    b, task_b, _ = _run(tmp_path, "fine", views, records, fine)
    assert _query_all(a, views) == _query_all(b, views)
    assert task_a.view_counters() == task_b.view_counters()


def test_crash_and_replay_rewrites_identical_results(tmp_path, views, records):
    cuts = list(range(400, len(records), 400))
    clean, clean_task, clean_sink = _run(tmp_path, "clean", views, records, cuts)
    crashed, crashed_task, crashed_sink = _run(
        tmp_path, "crashed", views, records, cuts, crash_at=7
    )
    assert _query_all(crashed, views) == _query_all(clean, views)
    assert crashed_task.view_counters() == clean_task.view_counters()
    # the replay re-sent some dead letters (at least once), none was lost
    assert _sent(crashed_sink) == _sent(clean_sink)
    # the archive holds every valid offset exactly once after the replay
    archived = []
    for key in crashed.list("archive/events/"):
        archived += pq.read_table(io.BytesIO(crashed.get(key))).column("offset").to_pylist()
    clean_archived = []
    for key in clean.list("archive/events/"):
        clean_archived += pq.read_table(io.BytesIO(clean.get(key))).column("offset").to_pylist()
    assert sorted(archived) == sorted(clean_archived)
    assert len(archived) == len(set(archived))


def test_counters_balance_per_view(tmp_path, views, records):
    _, task, sink = _run(tmp_path, "balance", views, records, list(range(1000, len(records), 1000)))
    for name, c in task.view_counters().items():
        assert c["consumed"] == len(records), name
        assert c["consumed"] == c["processed"] + c["dead_lettered"] + c["dropped_late"], name
    assert task.total_dead_lettered == len(sink.letters) > 0


def test_closed_segments_leave_memory_after_a_checkpoint(tmp_path, views, records):
    _, task, _ = _run(tmp_path, "evict", views, records, list(range(2000, len(records), 2000)))
    for state in task.states.values():
        open_segments = list(state.buckets)
        assert state.closed_segments(task.watermark) == []
        assert len(open_segments) <= 2, (state.view.name, open_segments)


def test_a_replay_rewrites_no_realtime_file_before_it_gets_past_what_the_files_hold(
    tmp_path, views, records
):
    """A task that crashed after flushing beyond its checkpoint: its successor replays from
    the checkpoint, and until it reaches what the files already hold it leaves them alone,
    even across its own checkpoint and a second crash (served results never go back); then
    it ends where a clean run ends."""
    clean, _, _ = _run(tmp_path, "clean", views, records, list(range(400, len(records), 400)))
    store = LocalObjectStore(tmp_path / "held")
    settings = SluiceSettings(state_dir=tmp_path / "held")
    sink = CollectingDeadLetters()

    def task() -> StreamTask:
        return StreamTask("events", 0, views, store, sink, settings)

    first = task()
    assert first.restore() is None
    first.start_at(0)
    first.process(records[:2000])
    first.checkpoint()
    first.process(records[2000:4000])
    first.flush()  # the files now hold offsets up to 4000; then the process dies
    held = _segments(store)

    second = task()
    assert second.restore() == 2000 and second.replay_until == 4000
    second.process(records[2000:3000])
    second.flush()
    second.checkpoint()
    assert _segments(store) == held, "a replaying task rewrote files that were ahead of it"
    # it dies too: the next one still knows how far the files are
    third = task()
    assert third.restore() == 3000 and third.replay_until == 4000
    third.process(records[3000:3500])
    third.flush()
    assert _segments(store) == held
    third.process(records[3500:])
    third.checkpoint()
    assert third.replay_until <= third.next_offset
    assert _query_all(store, views) == _query_all(clean, views)
    assert load_checkpoint(store, "events", 0).replay_until == 0
