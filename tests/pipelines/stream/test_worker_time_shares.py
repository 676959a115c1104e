"""A worker reports where its time goes: the share of wall time spent reading, decoding,
aggregating, archiving, flushing and checkpointing, each between 0 and 1, together at most 1."""

from __future__ import annotations

import dataclasses
import threading
import uuid

import pytest

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.control import ControlStore
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kafka import ensure_topics
from pipelines.kafka.writer import open_writer
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId
from pipelines.stream.worker import TIME_PARTS
from pipelines.views import load_views
from tests.fixtures.processes import wait_until

pytestmark = pytest.mark.broker


def test_the_worker_reports_its_time_shares(broker, tmp_path) -> None:
    topic = f"shares-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: 2, f"{topic}.dlq": 1})
    writer = open_writer(broker.bootstrap, None)
    replay(
        load_trace("nyc_taxi"),
        GeneratorOptions(max_events=40_000, peak_rate=40_000, speedup=120),
        lambda m: writer.send(topic, m.key, m.value),
        pace=False,
    )
    writer.flush()
    writer.close()
    views = [
        dataclasses.replace(v, topic=topic)
        for v in load_views(PROJECT_ROOT / "data" / "views.yaml")
        if v.topic == "events"
    ]
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
        status_interval_s=0.3,
        worker_max_rate=20_000,  # long enough to report several times while busy
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
    seen: list[dict[str, float]] = []
    thread = threading.Thread(target=worker.run, kwargs={"max_idle_s": 2.0}, daemon=True)
    thread.start()
    try:

        def busy_report() -> bool:
            rows = control.workers()
            if rows and rows[0]["time_shares"]:
                seen.append(rows[0]["time_shares"])
            return any(s.get("aggregate", 0) > 0 and s.get("decode", 0) > 0 for s in seen)

        wait_until(busy_report, 60, "a report with decoding and aggregating in it")
    finally:
        thread.join(60)
        control.close()
    for shares in seen:
        assert set(shares) == set(TIME_PARTS)
        assert all(0.0 <= v <= 1.0 for v in shares.values())
        assert sum(shares.values()) <= 1.05  # parts of one wall clock (rounding aside)
