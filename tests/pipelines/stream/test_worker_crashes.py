"""A real worker (reading an in-memory broker), driven as an agent drives it (``on_event``): a task whose
batch raises is dropped alone with the offsets it was processing, the worker and its other
tasks go on, and a restart with its crashes quarantines the record and finishes the rest."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
import pytest

from pipelines.config import SluiceSettings
from pipelines.control import TaskCrash
from pipelines.exceptions import SchemaRegistryUnreachable
from pipelines.kafka.memory import MemoryBroker
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId
from pipelines.views import parse_views
from tests.fixtures import poison as poison_fixture  # registers fails_on
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import memory_clients

COUNT = 400
POISON_AT = 250  # in partition 0


def _views(topic: str, poison: str):
    return parse_views(
        [
            {
                "name": name,
                "topic": topic,
                "grouping_cols": ["org"],
                "interval": "1h",
                "aggregation_info": [spec],
            }
            for name, spec in (
                ("counts", {"aggregation": "count", "aggregated_col_name": "n"}),
                (
                    "fragile",
                    {
                        "aggregation": "fails_on",
                        "col_name": "event_id",
                        "aggregated_col_name": "n",
                        "params": {"value": poison},
                    },
                ),
            )
        ]
    )


def _produce(broker: MemoryBroker, topic: str, poison: str) -> None:
    now_ms = int(time.time() * 1000)
    for i in range(COUNT):
        for partition in (0, 1):
            event_id = poison if (partition, i) == (0, POISON_AT) else f"e{partition}-{i}"
            event = {
                "event_id": event_id,
                "event_time": now_ms + i,
                "org": f"org-{i % 5}",
                "client": "c",
                "bytes_tx": i,
                "session_id": "s",
                "event_type": "view",
            }
            broker.send(topic, b"k", orjson.dumps(event), partition=partition)


@pytest.mark.parametrize(
    ("poison", "crash_names_the_record"),
    [("boom", True), ("oserror", False), ("registry", False)],
)
def test_a_crash_drops_its_task_alone_and_a_restart_quarantines_the_record(
    tmp_path, monkeypatch, poison, crash_names_the_record
) -> None:
    """``oserror``, ``registry``: a failure of what the task talks to (here the view raises
    OSError, or the schema registry's unreachable error) names no offsets, so it can never get
    a record quarantined."""
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    broker = MemoryBroker()
    broker.create_topic(topic, 2)
    _produce(broker, topic, poison)
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
        poll_max_records=100,
    )
    events = []
    running_at_crash = []

    def on_event(event) -> None:
        if event.kind == "crashed":  # an agent records it now: no restart may come before
            running_at_crash.append(event.task in worker.running())
        events.append(event)

    views = _views(topic, poison)
    if not crash_names_the_record:
        failure = OSError if poison == "oserror" else SchemaRegistryUnreachable
        monkeypatch.setattr(poison_fixture.FailsOn, "raises", failure)
    worker = StreamWorker(
        "w0",
        [],
        views,
        settings,
        memory_clients(broker, topic),
        LocalObjectStore(settings.resolved_storage_root),
        topic=topic,
        on_event=on_event,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        for p in (0, 1):
            worker.start_task(TaskId(topic, p), 1, views)
        thread.start()
        wait_until(lambda: any(e.kind == "crashed" for e in events), 30, "the crash")
        (crash,) = [e for e in events if e.kind == "crashed"]
        assert crash.task == TaskId(topic, 0) and crash.view == "fragile"
        assert running_at_crash == [True]  # still running() while its crash is reported
        if crash_names_the_record:
            assert crash.first_offset <= POISON_AT < crash.end_offset
            assert crash.error.endswith("PoisonedRecord: event_id is 'boom'")
        else:
            assert crash.first_offset == crash.end_offset  # no offsets: nothing to isolate
        # the other task goes on to the end, the worker thread is alive
        wait_until(
            lambda: (
                worker.tasks.get(TaskId(topic, 1))
                and worker.tasks[TaskId(topic, 1)].next_offset == COUNT
            ),
            30,
            "partition 1 processed",
        )
        assert thread.is_alive() and TaskId(topic, 0) not in worker.tasks
        if not crash_names_the_record:
            return
        # the agent's restarts: with the batch crash, then with the record's own crash too
        first = TaskCrash(
            str(crash.task), crash.first_offset, crash.end_offset, crash.error, "fragile"
        )
        worker.start_task(TaskId(topic, 0), 1, views, crashes=[first])
        wait_until(lambda: sum(e.kind == "crashed" for e in events) == 2, 30, "the crash alone")
        alone = [e for e in events if e.kind == "crashed"][-1]
        assert (alone.first_offset, alone.end_offset) == (POISON_AT, POISON_AT + 1)
        again = TaskCrash(
            str(crash.task), POISON_AT, POISON_AT + 1, alone.error, "fragile", alone.record_ts
        )
        worker.start_task(TaskId(topic, 0), 1, views, crashes=[first, again])
        wait_until(
            lambda: (
                worker.tasks.get(TaskId(topic, 0))
                and worker.tasks[TaskId(topic, 0)].next_offset == COUNT
            ),
            30,
            "partition 0 processed past the poison",
        )
        task = worker.tasks[TaskId(topic, 0)]
        assert task.dead_lettered == {"crashed_task": 1}
        letters = [orjson.loads(r.value) for r in broker.records(f"{topic}.dlq", 0)]
        assert [(m["source_partition"], m["source_offset"], m["reason"]) for m in letters] == [
            (0, POISON_AT, "crashed_task")
        ]
        assert task.states["counts"].processed == COUNT - 1
        assert sum(e.kind == "crashed" for e in events) == 2
        assert running_at_crash == [True, True]
    finally:
        worker.stop_event.set()
        thread.join(timeout=30)
