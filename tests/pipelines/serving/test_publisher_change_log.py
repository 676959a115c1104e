"""The publisher commits what the tasks wrote, wherever it is: a partition held back for hours
of event time, then released, fills old hours that the table then holds in full after one pass.
The table is read through DuckDB and compared with an oracle from the topic (kafka-python)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import HOUR_MS, ChangeLog, change_records, oldest_change_ms
from pipelines.serving.publisher import RealtimePublisher
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.tables import TablesConfig, ViewTables
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views
from tests.fixtures.stream import make_stream, read_records, table_problems


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


OLD_LOOKBACK_MS = 3 * HOUR_MS
"""How far behind the newest hour the publisher used to look."""
CHUNK = 1_500


def _flushing(task: StreamTask, records: list, publisher: RealtimePublisher) -> None:
    """Feed ``records`` in chunks, flushing and publishing after each, as a fleet would."""
    for i in range(0, len(records), CHUNK):
        task.process(records[i : i + CHUNK])
        task.flush()
        publisher.publish_once()


@pytest.mark.broker
def test_a_lagging_partition_fills_its_old_hours_in_the_table(
    broker, control_url, tmp_path
) -> None:
    stream = make_stream(
        broker.bootstrap, tmp_path, f"lag-{uuid.uuid4().hex[:8]}", 8_000, 2, rate=(800, 3_600)
    )
    views = stream["views"]
    records = read_records(broker.bootstrap, stream["topic"], 2)
    store = LocalObjectStore(tmp_path / "root")
    tables = ViewTables(TablesConfig(warehouse=store.root, catalog_url=control_url))
    publisher = RealtimePublisher(store, tables, views, interval_s=30)
    settings = SluiceSettings(state_dir=tmp_path / "state")
    tasks = [
        StreamTask(stream["topic"], p, views, store, CollectingDeadLetters(), settings)
        for p in (0, 1)
    ]
    for task in tasks:
        task.start_at(0)
    held = len(records[1]) // 5
    _flushing(tasks[1], records[1][:held], publisher)  # partition 1 stops early: it lags
    _flushing(tasks[0], records[0], publisher)  # partition 0 runs to its end
    lag = tasks[0].watermark - tasks[1].watermark
    assert lag > 2 * OLD_LOOKBACK_MS, f"partition 1 lags only {lag / HOUR_MS:.1f} h"
    assert table_problems(stream, tables), "the held-back events are missing from the table"

    _flushing(tasks[1], records[1][held:], publisher)  # released: it catches up
    problems = table_problems(stream, tables)
    assert not problems, "\n".join(problems[:20])
    for view in views:  # the last pass consumed the log: no change is left unpublished
        assert change_records(store, view.name) == [] and oldest_change_ms(store, view.name) is None
    tables.close()


def test_a_task_keeps_one_record_per_view_dated_by_its_oldest_unpublished_flush(tmp_path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    log = ChangeLog(store, "events", 3, 1, 2)
    log.record("v", [HOUR_MS], 4)
    (first,) = change_records(store, "v")
    for n in range(2, 5):  # no publisher takes them: still one record, of every flush
        log.record("v", [n * HOUR_MS], 4)
    (folded,) = change_records(store, "v")
    assert folded.segments == (HOUR_MS, 2 * HOUR_MS, 3 * HOUR_MS, 4 * HOUR_MS)
    assert folded.at_ms == first.at_ms == oldest_change_ms(store, "v")
    assert (folded.task, folded.generation) == ("events-3-b1of2", 4)
    store.delete(folded.key)  # a publisher took it
    log.record("v", [5 * HOUR_MS], 4)
    (fresh,) = change_records(store, "v")
    assert fresh.segments == (5 * HOUR_MS,) and fresh.at_ms >= folded.at_ms
    ChangeLog(store, "events", 0).record("v", [HOUR_MS], 1)  # another task: its own record
    assert len(change_records(store, "v")) == 2


def test_a_former_leaders_pass_commits_nothing_and_leaves_the_records(tmp_path) -> None:
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    store = LocalObjectStore(tmp_path / "root")
    tables = ViewTables(
        TablesConfig(warehouse=store.root, catalog_url=f"sqlite:///{tmp_path / 'c.db'}")
    )
    options = GeneratorOptions(max_events=2_000, peak_rate=20_000, speedup=60, warmup_events=0)
    messages = synthesize(load_trace("nyc_taxi"), options)
    task = StreamTask(
        "events", 0, views, store, CollectingDeadLetters(), SluiceSettings(state_dir=tmp_path)
    )
    task.start_at(0)
    task.process([Rec(i, 1_000 + i, m.value) for i, m in enumerate(messages)])
    task.flush()
    leads = [False]
    publisher = RealtimePublisher(store, tables, views, leading=lambda: leads[0])
    passed = publisher.publish_once()
    assert passed.committed == {} and set(passed.deferred) == {v.name for v in views}
    assert all(tables.find(v.name) is None for v in views), "a former leader committed"
    assert all(change_records(store, v.name) for v in views), "its records were consumed"
    leads[0] = True
    assert set(publisher.publish_once().committed) == {v.name for v in views}
    assert not any(change_records(store, v.name) for v in views)
    tables.close()


def test_a_former_leaders_commit_after_the_new_leaders_is_refused_by_its_term(tmp_path) -> None:
    """The gap a look at the lease leaves: a former leader (term 1), past that look, commits
    after the new leader (term 2) did. Its commit is refused on the snapshot it would go on
    top of, the table keeps the new leader's rows, and its records stay for the new leader;
    a publisher without a lease (``sluice tables publish``) commits unfenced."""
    from pipelines.tables import PUBLISHER_TERM

    views = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if not v.is_session]
    store = LocalObjectStore(tmp_path / "root")
    tables = ViewTables(
        TablesConfig(warehouse=store.root, catalog_url=f"sqlite:///{tmp_path / 'c.db'}")
    )
    options = GeneratorOptions(max_events=2_000, peak_rate=20_000, speedup=60, warmup_events=0)
    records = [
        Rec(i, 1_000 + i, m.value)
        for i, m in enumerate(synthesize(load_trace("nyc_taxi"), options))
    ]
    task = StreamTask(
        "events", 0, views, store, CollectingDeadLetters(), SluiceSettings(state_dir=tmp_path)
    )
    task.start_at(0)
    task.process(records[:1_000])
    task.flush()
    new_leader = RealtimePublisher(store, tables, views, term=lambda: 2)
    assert set(new_leader.publish_once().committed) == {v.name for v in views}
    snapshots = {v.name: tables.find(v.name).current_snapshot().snapshot_id for v in views}
    assert all(tables.find(v.name).properties[PUBLISHER_TERM] == "2" for v in views)
    task.process(records[1_000:])
    task.flush()
    former = RealtimePublisher(store, tables, views, term=lambda: 1)
    passed = former.publish_once()
    assert passed.committed == {} and set(passed.deferred) == {v.name for v in views}
    assert {v.name: tables.find(v.name).current_snapshot().snapshot_id for v in views} == snapshots
    assert all(change_records(store, v.name) for v in views), "its records were consumed"
    assert set(new_leader.publish_once().committed) == {v.name for v in views}
    assert not any(change_records(store, v.name) for v in views)
    task.process([Rec(len(records), 1_000 + len(records), records[-1].value)])
    task.flush()
    unfenced = RealtimePublisher(store, tables, views)
    assert unfenced.publish_once().committed, "a publisher without a lease commits"
    tables.close()
