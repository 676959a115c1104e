"""A worker that has read a bounded input to its end checkpoints at once: the archive sensor
closes the input's last hours only when every task has checkpointed through its end offsets,
so the hours would otherwise wait for the checkpoint interval."""

from __future__ import annotations

import dataclasses
import threading
import uuid

import pytest

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.control import ControlStore
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kafka import ensure_topics, exact_end_offsets
from pipelines.kafka.writer import open_writer
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId
from pipelines.views import load_views
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import read_records

pytestmark = pytest.mark.broker


def test_a_worker_checkpoints_once_it_has_read_the_input_to_its_recorded_end(
    broker, tmp_path
) -> None:
    topic = f"ended-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: 2, f"{topic}.dlq": 1})
    writer = open_writer(broker.bootstrap, None)
    replay(
        load_trace("nyc_taxi"),
        GeneratorOptions(max_events=3_000, peak_rate=3_000, speedup=480),
        lambda m: writer.send(topic, m.key, m.value),
        pace=False,
    )
    writer.flush()
    writer.close()
    # the topic's ends as another client reads them
    ends = {p: rs[-1].offset + 1 for p, rs in read_records(broker.bootstrap, topic, 2).items()}
    views = [
        dataclasses.replace(v, topic=topic)
        for v in load_views(PROJECT_ROOT / "data" / "views.yaml")
        if v.topic == "events"
    ]
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=3600.0,  # never, within this test, but for the input's end
        status_interval_s=0.2,
    )
    control = ControlStore(settings.resolved_control_store_url)
    worker = StreamWorker(
        "w0",
        [TaskId(topic, p) for p in range(2)],
        views,
        settings,
        broker.bootstrap,
        LocalObjectStore(tmp_path / "state" / "storage"),
        control,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:

        def tasks() -> dict[int, object]:
            return {s.partition: s for s in control.tasks() if s.topic == topic}

        def caught_up() -> bool:
            found = tasks()
            return len(found) == 2 and all(found[p].next_offset == ends[p] for p in ends)

        wait_until(caught_up, 60, "the worker to read the whole topic")
        # caught up with no end recorded: five more reports, and still no checkpoint
        reports = [max(s.heartbeat_at for s in tasks().values())]

        def five_more_reports() -> bool:
            latest = max(s.heartbeat_at for s in tasks().values())
            if latest != reports[-1]:
                reports.append(latest)
            return len(reports) > 5

        wait_until(five_more_reports, 30, "five more status reports")
        assert all(s.checkpointed_offset is None for s in tasks().values())

        control.input_ends.record(topic, exact_end_offsets(broker.bootstrap, None, topic))
        assert dict(control.input_ends.of_topic(topic).end_offsets) == ends
        wait_until(
            lambda: all(tasks()[p].checkpointed_offset == ends[p] for p in ends),
            30,
            "a checkpoint through the input's end",
        )
    finally:
        worker.stop_event.set()
        thread.join(60)
        control.close()
