"""The per-worker rate cap (SLUICE_WORKER_MAX_RATE): a real worker (reading an in-memory broker)
never processes faster than its cap, reports itself busy while throttled, and still stops
promptly."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest

from pipelines.config import SluiceSettings
from pipelines.kafka.memory import MemoryBroker
from pipelines.stream import StreamWorker
from pipelines.stream.worker import THROTTLE_SLICE_S
from pipelines.views import parse_views
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import start_worker

PARTITIONS = 2


def _views(topic: str):
    return parse_views(
        {
            "views": [
                {
                    "name": "events_by_org",
                    "topic": topic,
                    "grouping_cols": ["org"],
                    "interval": "1m",
                    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
                }
            ]
        }
    )


def _produce(broker: MemoryBroker, topic: str, count: int) -> None:
    now_ms = int(time.time() * 1000)
    for i in range(count):
        event = {
            "event_id": f"e{i}",
            "event_time": now_ms + i,
            "org": f"org-{i % 5}",
            "client": "c",
            "bytes_tx": i,
            "session_id": "s",
            "event_type": "view",
        }
        broker.send(topic, b"k", orjson.dumps(event), partition=i % PARTITIONS)


@pytest.fixture
def capped_worker(tmp_path):
    """Start a worker on a fresh topic in a thread: (worker, control store, thread, topic)."""
    started = []
    broker = MemoryBroker()

    def start(messages: int, max_rate: float):
        topic = f"cap-{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic, PARTITIONS)
        _produce(broker, topic, messages)
        settings = SluiceSettings(
            state_dir=tmp_path / "state",
            dead_letter_topic=f"{topic}.dlq",
            flush_interval_s=1.0,
            checkpoint_interval_s=2.0,
            status_interval_s=0.3,
            worker_max_rate=max_rate,
        )
        worker, control, thread = start_worker(broker, topic, PARTITIONS, _views(topic), settings)
        started.append((worker, control, thread))
        return worker, control, thread

    yield start
    for worker, control, thread in started:
        worker.stop_event.set()
        thread.join(30)
        control.close()


def _consumed(worker: StreamWorker) -> int:
    return sum(task.consumed for task in worker.tasks.values())


def test_a_capped_worker_never_outruns_its_cap_and_reports_itself_busy(capped_worker):
    rate, messages = 1000.0, 3000
    worker, control, thread = capped_worker(messages, rate)
    wait_until(lambda: worker.started_at is not None, 30, "the worker to start")
    batch = max(1, int(rate * THROTTLE_SLICE_S))
    samples = []
    utilisations = []

    def check():
        consumed = _consumed(worker)
        elapsed = time.monotonic() - worker.started_at
        samples.append((elapsed, consumed))
        # every batch of n records takes at least n / rate: at most one batch ahead of the cap
        assert consumed <= rate * elapsed + batch, (elapsed, consumed)
        if elapsed > 1.0 and consumed < messages - 2 * batch:  # capped, not draining the tail
            utilisations.extend(t.utilization for t in control.tasks() if t.state == "running")
        return consumed >= messages

    wait_until(check, 60, f"{messages} messages at <= {rate:.0f} msg/s", every_s=0.05)
    assert len(samples) > 10  # the check above ran while the worker was capped
    # at the cap, throttled time counts as busy (the first report of a run may still be 0)
    assert utilisations and sorted(utilisations)[len(utilisations) // 2] >= 0.8, utilisations
    assert sum(t.rate_in for t in control.tasks()) <= rate * 1.1
    assert thread.is_alive()


def test_a_stop_signal_ends_a_throttle_pause_at_once(capped_worker):
    # 0.1 msg/s: every record is followed by a 10 s pause
    worker, control, thread = capped_worker(20, 0.1)
    wait_until(lambda: _consumed(worker) >= 1, 30, "the first record")
    stop_requested = time.monotonic()
    worker.stop_event.set()
    thread.join(8)
    assert not thread.is_alive(), "the worker slept through its stop signal"
    assert time.monotonic() - stop_requested < 8
    assert _consumed(worker) < 20
    stopped = control.tasks()
    assert stopped and all(t.state == "stopped" for t in stopped)
    assert all(t.checkpointed_offset == t.next_offset for t in stopped)
