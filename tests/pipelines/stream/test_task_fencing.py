"""Fencing in the data plane: the highest generation's checkpoint wins, a fenced owner writes
nothing, a view that cannot be restored is named in a ViewCrash."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.exceptions import TaskFenced, ViewCrash
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import checkpoint_prefix, legacy_checkpoint_key
from pipelines.storage import LocalObjectStore
from pipelines.stream.checkpoint import TaskCheckpoint, load_checkpoint, save_checkpoint
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


@pytest.fixture(scope="module")
def records():
    options = GeneratorOptions(max_events=2_000, peak_rate=20_000, speedup=60, warmup_events=0)
    messages = synthesize(load_trace("nyc_taxi"), options)
    return [Rec(i, 1_000 + i, m.value) for i, m in enumerate(messages)]


@pytest.fixture(scope="module")
def views():
    return [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if v.topic == "events"]


def _checkpoint(generation: int, next_offset: int) -> TaskCheckpoint:
    return TaskCheckpoint("events", 0, next_offset, 0, next_offset, {}, generation=generation)


def test_the_highest_generation_wins_and_older_ones_are_removed(tmp_path) -> None:
    store = LocalObjectStore(tmp_path)
    assert load_checkpoint(store, "events", 0) is None
    save_checkpoint(store, _checkpoint(2, 100))
    save_checkpoint(store, _checkpoint(5, 300))
    assert load_checkpoint(store, "events", 0).next_offset == 300
    assert len(store.list(checkpoint_prefix("events", 0))) == 1  # generation 2 removed
    save_checkpoint(store, _checkpoint(3, 999))  # a stale owner writes after the newer one
    restored = load_checkpoint(store, "events", 0)
    assert (restored.generation, restored.next_offset) == (5, 300)


def test_a_checkpoint_from_before_generations_is_read(tmp_path) -> None:
    store = LocalObjectStore(tmp_path)
    save_checkpoint(store, _checkpoint(0, 42))
    data = store.get(store.list(checkpoint_prefix("events", 0))[0])
    store.delete(store.list(checkpoint_prefix("events", 0))[0])
    store.put(legacy_checkpoint_key("events", 0), data)
    assert load_checkpoint(store, "events", 0).next_offset == 42


def _task(store, views, generation, fence=None) -> StreamTask:
    settings = SluiceSettings()
    return StreamTask(
        "events", 0, views, store, CollectingDeadLetters(), settings, generation, fence
    )


def test_a_fenced_owner_writes_nothing(tmp_path, records, views) -> None:
    store = LocalObjectStore(tmp_path)
    owner = {"current": True}
    task = _task(store, views, 1, fence=lambda: owner["current"])
    assert task.restore() is None
    task.start_at(0)
    task.process(records[:1000])
    task.checkpoint()
    written = set(store.list(""))
    task.process(records[1000:])
    owner["current"] = False  # the job model moved the task on
    with pytest.raises(TaskFenced):
        task.checkpoint()
    assert set(store.list("")) == written
    assert load_checkpoint(store, "events", 0).next_offset == 1000


def test_an_owner_older_than_the_checkpoint_refuses_to_run(tmp_path, records, views) -> None:
    store = LocalObjectStore(tmp_path)
    newer = _task(store, views, 4)
    newer.restore()
    newer.start_at(0)
    newer.process(records[:500])
    newer.checkpoint()
    with pytest.raises(TaskFenced, match="generation 4"):
        _task(store, views, 3).restore()
    inherit = _task(store, views, None)  # no job model: carries the checkpoint's generation
    assert inherit.restore() == 500 and inherit.generation == 4


def test_an_unreadable_view_state_is_a_crash_of_that_view(tmp_path, records, views) -> None:
    store = LocalObjectStore(tmp_path)
    task = _task(store, views, 1)
    task.restore()
    task.start_at(0)
    task.process(records)
    task.checkpoint()
    checkpoint = load_checkpoint(store, "events", 0)
    victim = sorted(checkpoint.states)[0]
    checkpoint.states[victim] = b"not parquet"
    save_checkpoint(store, checkpoint)
    with pytest.raises(ViewCrash) as crash:
        _task(store, views, 1).restore()
    assert crash.value.view == victim and crash.value.task == "events:0"
    others = [v for v in views if v.name != victim]
    assert _task(store, others, 1).restore() == len(records)
