"""A worker reports where its time goes: the share of wall time spent reading, decoding,
aggregating, archiving, flushing and checkpointing, each between 0 and 1, together at most 1."""

from __future__ import annotations

from pipelines.config import SluiceSettings
from pipelines.generator import GeneratorOptions
from pipelines.kafka.memory import MemoryBroker
from pipelines.stream.worker import TIME_PARTS
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import example_views_on, replayed_topic, start_worker


def test_the_worker_reports_its_time_shares(tmp_path) -> None:
    broker = MemoryBroker()
    options = GeneratorOptions(max_events=40_000, peak_rate=40_000, speedup=120)
    topic = replayed_topic(broker, "shares", 2, options)
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
        status_interval_s=0.3,
        worker_max_rate=20_000,  # long enough to report several times while busy
    )
    worker, control, thread = start_worker(broker, topic, 2, example_views_on(topic), settings)
    seen: list[dict[str, float]] = []
    try:

        def busy_report() -> bool:
            rows = control.workers()
            if rows and rows[0]["time_shares"]:
                seen.append(rows[0]["time_shares"])
            return any(s.get("aggregate", 0) > 0 and s.get("decode", 0) > 0 for s in seen)

        wait_until(busy_report, 60, "a report with decoding and aggregating in it")
    finally:
        worker.stop_event.set()
        thread.join(60)
        control.close()
    for shares in seen:
        assert set(shares) == set(TIME_PARTS)
        assert all(0.0 <= v <= 1.0 for v in shares.values())
        assert sum(shares.values()) <= 1.05  # parts of one wall clock (rounding aside)
