"""The live planner sees a season: per-minute rates kept in the control store for days.

Defect this was written against: the autoscaler sensor kept its last 60 snapshots (30 minutes at its
30 s interval) as the policy's history, while the forecaster needs a day of rates; live, the
forecast had no seasonality. Now the sensor records one snapshot per minute in the control
store (pruned after ``history_retention_s``, 8 days by default) and hands the policy that whole
span, as the simulator hands it everything since the start.
"""

from __future__ import annotations

import dagster as dg
import pytest

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.jobs.correction import scale_stream_workers
from orchestration.resources.control import LocalControlStoreResource
from orchestration.sensors.autoscaler import make_autoscaling_sensor
from pipelines.control import ControlStore, TaskStatus

DAY = 86_400.0


class RecordingPolicy:
    """Never scales; remembers the history it was given."""

    name = "recording"

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def decide(self, metrics, history):
        self.seen.append((metrics.time, [h.time for h in history]))
        return ScalingDecision.no_change(metrics.workers, "recording", self.name)


def _report(store: ControlStore, now: float, rate: float) -> None:
    store.report_tasks(
        [
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id="w0",
                pid=1,
                rate_in=rate / 4,
                utilization=0.5,
                next_offset=1000,
                end_offset=1000,
                heartbeat_at=now,
            )
            for p in range(4)
        ]
    )


def test_the_live_policy_is_given_a_day_and_more_of_history(
    tmp_path, monkeypatch: pytest.MonkeyPatch, settings: AutoscaleSettings
) -> None:
    from orchestration.control_plane.autoscaling import config, policies

    seen: list = []
    monkeypatch.setitem(policies.POLICIES, "recording", lambda s: RecordingPolicy(seen))
    monkeypatch.setattr(config, "POLICY_NAMES", (*config.POLICY_NAMES, "recording"))
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = ControlStore(url)
    clock = {"now": 1_000_000.0}
    live = settings.model_copy(update={"policy": "recording", "sensor_cooldown_s": 0.0})
    sensor = make_autoscaling_sensor(
        scale_stream_workers, settings=live, clock=lambda: clock["now"]
    )
    resource = LocalControlStoreResource(sqlite_url=url)
    cursor = None
    start = clock["now"]
    instance = dg.DagsterInstance.ephemeral()  # one for every tick, as the daemon has
    while clock["now"] < start + 1.5 * DAY:  # a tick every 30 minutes for a day and a half
        _report(store, clock["now"], rate=1000.0)
        result = sensor.evaluate_tick(
            dg.build_sensor_context(
                cursor=cursor, instance=instance, resources={"control_store": resource}
            )
        )
        cursor = result.cursor
        clock["now"] += 1800.0
    now, history = seen[-1]
    assert history, "the policy got no history"
    assert now - history[0] >= DAY, f"history spans {(now - history[0]) / 3600:.1f} h < a day"
    assert history == sorted(history) and history[-1] < now


def test_rate_history_is_pruned_after_its_retention(tmp_path) -> None:
    store = ControlStore(f"sqlite:///{tmp_path / 'control.db'}")
    for day in range(10):
        store.record_rate("events", day * DAY, {"time": day * DAY}, retain_s=8 * DAY)
    kept = store.rate_history("events", 0, 11 * DAY)
    assert [s["time"] for s in kept] == [d * DAY for d in range(1, 10)]
