"""A task whose checkpointed offset is out of the log's range starts over at the log start, logs
an error, and counts the reset in its status, where ``sluice status`` shows it; the count
survives the next restart. Past the log end (as after a topic was recreated) on the embedded
broker, whose listed end a fetch must confirm; before the log start (retention deleted what the
task had not read, which the embedded broker never does) on the in-memory one."""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid

import orjson
import pytest
from rich.console import Console

from orchestration.cli.status import render
from orchestration.control_plane.lag import TaskLag
from pipelines.config import SluiceSettings
from pipelines.kafka import ensure_topics, producer
from pipelines.kafka.memory import MemoryBroker
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.stream.checkpoint import TaskCheckpoint, load_checkpoint, save_checkpoint
from pipelines.views import parse_views
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import memory_clients, read_partitions

COUNT = 300
STALE_OFFSET = 50_000  # what the checkpoint of the topic's earlier life said


def _events() -> list[bytes]:
    now_ms = int(time.time() * 1000)
    return [
        orjson.dumps(
            {
                "event_id": f"e{i}",
                "event_time": now_ms + i,
                "org": f"org-{i % 3}",
                "client": "c",
                "bytes_tx": i,
                "session_id": "s",
                "event_type": "view",
            }
        )
        for i in range(COUNT)
    ]


def _produce(bootstrap: str, topic: str) -> None:
    out = producer(bootstrap)
    for value in _events():
        out.send(topic, value=value, key=b"k", partition=0)
    out.flush()
    out.close()


def _views(topic: str):
    return parse_views(
        [
            {
                "name": "counts",
                "topic": topic,
                "grouping_cols": ["org"],
                "interval": "1h",
                "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
            }
        ]
    )


def _run_until_read(worker: StreamWorker, task_id: TaskId, views) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    worker.start_task(task_id, 1, views)
    thread.start()
    wait_until(
        lambda: worker.tasks.get(task_id) and worker.tasks[task_id].next_offset == COUNT,
        30,
        "the partition read to its end",
    )
    return thread


@pytest.mark.broker
def test_a_checkpoint_past_the_log_end_is_an_error_counted_in_status(
    broker, tmp_path, caplog
) -> None:
    topic = f"reset-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: 1, f"{topic}.dlq": 1})
    _produce(broker.bootstrap, topic)
    in_topic = len(read_partitions(broker.bootstrap, topic, 1)[0])  # another client's count
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
    )
    store = LocalObjectStore(settings.resolved_storage_root)
    views = _views(topic)
    task_id = TaskId(topic, 0)
    save_checkpoint(
        store,
        TaskCheckpoint(topic, 0, STALE_OFFSET, 0, STALE_OFFSET, {}, generation=1, replay_until=0),
    )

    def worker() -> StreamWorker:
        clients = open_worker_clients(broker.bootstrap, None, topic)
        return StreamWorker(
            "w0", [], views, settings, clients, store, topic=topic, on_event=[].append
        )

    first = worker()
    with caplog.at_level(logging.ERROR, logger="pipelines.stream.task"):
        thread = _run_until_read(first, task_id, views)
    try:
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(
            "offset out of range" in m and f"at {STALE_OFFSET}, past the log end {COUNT}" in m
            for m in errors
        ), errors
        task = first.tasks[task_id]
        # started over at the log start: every record in the topic counted, once
        assert task.states["counts"].processed == in_topic == COUNT
        status = task.status("w0", COUNT)
        assert status.views["offset_resets"] == 1
        out = io.StringIO()
        lag = TaskLag(status, 0, 0.0, 0.0, False)
        Console(file=out, width=200, color_system=None).print(render([lag], width=200))
        assert "1 offset reset (out of range)" in out.getvalue()
    finally:
        first.stop_event.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    saved = load_checkpoint(store, topic, 0)
    assert saved is not None and saved.next_offset == COUNT and saved.offset_resets == 1

    # the next owner resumes in range: no new error, the count is kept
    caplog.clear()
    second = worker()
    with caplog.at_level(logging.ERROR, logger="pipelines.stream.task"):
        thread = _run_until_read(second, task_id, views)
    try:
        # the task's errors only: kafka-python logs a failed metadata refresh as an ERROR too
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not [r for r in errors if r.name.startswith("pipelines.")], errors
        assert second.tasks[task_id].status("w0", COUNT).views["offset_resets"] == 1
    finally:
        second.stop_event.set()
        thread.join(timeout=30)


def test_a_checkpoint_before_the_log_start_keeps_its_state_and_counts_the_loss(
    tmp_path, caplog
) -> None:
    topic = f"retained-{uuid.uuid4().hex[:8]}"
    broker = MemoryBroker()
    broker.create_topic(topic, 1)
    events = _events()
    for value in events:
        broker.send(topic, b"k", value, partition=0)
    broker.delete_records(topic, 0, before=100)  # retention, before the task read them
    watermark = orjson.loads(events[40])["event_time"]  # where the checkpoint had got to
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
    )
    store = LocalObjectStore(settings.resolved_storage_root)
    views = _views(topic)
    save_checkpoint(
        store, TaskCheckpoint(topic, 0, 40, watermark, 40, {}, generation=1, replay_until=0)
    )
    worker = StreamWorker(
        "w0",
        [],
        views,
        settings,
        memory_clients(broker, topic),
        store,
        topic=topic,
        on_event=[].append,
    )
    task_id = TaskId(topic, 0)
    with caplog.at_level(logging.ERROR, logger="pipelines.stream.task"):
        thread = _run_until_read(worker, task_id, views)
    try:
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(
            "offset out of range" in m
            and "at 40, before the log start 100: 60 records were deleted" in m
            for m in errors
        ), errors
        task = worker.tasks[task_id]
        assert task.states["counts"].processed == COUNT - 100  # what the log still held
        assert task.status("w0", COUNT).views["offset_resets"] == 1
    finally:
        worker.stop_event.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    saved = load_checkpoint(store, topic, 0)
    assert saved is not None and saved.next_offset == COUNT and saved.offset_resets == 1
