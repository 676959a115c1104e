"""Fleet samples: summarized from task lags, recorded at the interval, pruned, selected by day."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestration.control_plane.fleet.samples import FleetSampler, summarize
from orchestration.control_plane.lag import TaskLag
from orchestration.control_plane.runtime import Runtime
from pipelines.config import KafkaSettings, SluiceSettings
from pipelines.control import FleetSample, TaskStatus

DAY_MS = 86_400_000
JULY_1 = int(datetime(2014, 7, 1, tzinfo=UTC).timestamp() * 1000)


def _lag(partition, worker, watermark, backlog=10, time_lag=2.0, stale=False, topic="events"):
    status = TaskStatus(
        task=f"{topic}-{partition}",
        topic=topic,
        partition=partition,
        worker_id=worker,
        pid=100 + partition,
        consumed=1000 * (partition + 1),
        watermark=watermark,
    )
    return TaskLag(status, backlog, time_lag, 1.0, stale)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def runtime(settings: SluiceSettings) -> Runtime:
    return Runtime(settings, KafkaSettings())


def test_a_sample_sums_live_tasks_and_takes_the_slowest_watermark():
    lags = [
        _lag(0, "w0", JULY_1 + 5000, backlog=7, time_lag=1.5),
        _lag(1, "w0", JULY_1 + 3000, backlog=3, time_lag=None),
        _lag(2, "w1", JULY_1 + 9000, backlog=5, time_lag=4.0),
        _lag(3, "w2", JULY_1 - 10, backlog=99, time_lag=99.0, stale=True),  # ignored
        _lag(0, "x0", JULY_1, topic="other"),  # another topic
    ]
    sample = summarize(lags, "events", now=42.0)
    assert sample == FleetSample(
        sampled_at=42.0,
        topic="events",
        workers=2,
        tasks=3,
        backlog=15,
        max_time_lag_s=4.0,
        min_watermark_ms=JULY_1 + 3000,
        consumed=1000 + 2000 + 3000,
    )


def test_no_watermark_until_every_task_has_one_and_none_without_live_tasks():
    sample = summarize([_lag(0, "w0", JULY_1), _lag(1, "w0", None)], "events", now=1.0)
    assert sample is not None and sample.min_watermark_ms is None
    assert summarize([_lag(0, "w0", JULY_1, stale=True)], "events", now=1.0) is None


def test_samples_are_recorded_once_per_interval(runtime: Runtime):
    clock = Clock()
    sampler = FleetSampler(runtime, interval_s=10.0, clock=clock)
    recorded = []
    for step in range(25):  # a supervisor loop every 2 s for 48 s
        clock.now = 1_000_000.0 + 2.0 * step
        watermark = JULY_1 + step * 60_000
        recorded += sampler.maybe_record([_lag(0, "w0", watermark), _lag(1, "w1", watermark)])
    assert [s.sampled_at - 1_000_000.0 for s in recorded] == [0.0, 10.0, 20.0, 30.0, 40.0]
    stored = runtime.control.fleet_samples("events", JULY_1, JULY_1 + DAY_MS)
    assert stored == recorded
    assert all(s.workers == 2 and s.tasks == 2 for s in stored)


def test_the_default_interval_comes_from_the_settings(tmp_path):
    settings = SluiceSettings(state_dir=tmp_path, fleet_sample_interval_s=3.0)
    assert FleetSampler(Runtime(settings, KafkaSettings())).interval_s == 3.0


def test_samples_are_selected_by_watermark_day_and_old_ones_pruned(tmp_path):
    settings = SluiceSettings(state_dir=tmp_path, fleet_sample_retention_days=14)
    runtime = Runtime(settings, KafkaSettings())
    clock = Clock()
    sampler = FleetSampler(runtime, interval_s=1.0, clock=clock)
    # a replay of two days of 2014 now, then live traffic 15 days later
    for watermark in (JULY_1 - 1, JULY_1, JULY_1 + DAY_MS - 1, JULY_1 + DAY_MS):
        clock.now += 5.0
        sampler.maybe_record([_lag(0, "w0", watermark)])
    day = runtime.control.fleet_samples("events", JULY_1, JULY_1 + DAY_MS)
    assert [s.min_watermark_ms for s in day] == [JULY_1, JULY_1 + DAY_MS - 1]
    assert runtime.control.fleet_samples("other", JULY_1, JULY_1 + DAY_MS) == []

    clock.now += 15 * 86_400.0
    live = int(clock.now * 1000)
    sampler.maybe_record([_lag(0, "w0", live)])
    everything = runtime.control.fleet_samples(None, 0, 2**62)
    assert [s.min_watermark_ms for s in everything] == [live], "older samples are pruned"
