"""The realtime_lag sensor and `sluice status` rate a task alike: Burrow over the same window,
restarted when the task moves (a new owner resumes from its checkpoint, so its offset goes
back), with a key bucket's backlog as its share of the partition's gap."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import dagster as dg
import pytest

from assets.constants import realtime_key
from orchestration.control_plane.lag import LagTracker, task_lags
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from orchestration.sensors import make_realtime_lag_sensor
from pipelines.control import ControlStore, TaskStatus
from pipelines.views import View
from tests.fixtures.dagster_fixture import example_views

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

TASK = "events:0#1/2"
# (generation, agent, next offset, log end): the task runs on a0, is handed off to a1, which
# restores the checkpoint at 450 (behind what a0 had reported) and catches up.
TICKS = [
    (1, "a0", 400, 1000),
    (1, "a0", 500, 1000),
    (1, "a0", 600, 1000),
    (2, "a1", 450, 1000),
    (2, "a1", 700, 1000),
    (2, "a1", 1000, 1000),
]


def _report(store: ControlStore, generation: int, agent: str, offset: int, end: int) -> TaskStatus:
    status = TaskStatus(
        task=TASK,
        topic="events",
        partition=0,
        worker_id=agent,
        pid=1,
        next_offset=offset,
        end_offset=end,
        backlog=0,
        last_processed_ts=time.time() * 1000,
        heartbeat_at=time.time(),
        generation=generation,
    )
    store.report_tasks([status])
    return status


def _view() -> View:
    return next(v for v in example_views() if v.name == "traffic_by_org")


def test_a_hand_off_is_not_an_error_for_the_sensor_nor_for_status(tmp_path: Path, caplog) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = ControlStore(url)
    sensor = make_realtime_lag_sensor([_view()])
    control = LagTracker()  # what `sluice status` and `up` keep between refreshes
    cursor = None
    seen = []
    try:
        for generation, agent, offset, end in TICKS:
            status = _report(store, generation, agent, offset, end)
            with dg.build_sensor_context(
                resources={
                    "control_store": LocalControlStoreResource(sqlite_url=url),
                    "storage": LocalStorageResource(),
                },
                cursor=cursor,
            ) as ctx:
                with caplog.at_level(logging.WARNING):
                    result = sensor.evaluate_tick(ctx)
                cursor = result.cursor
            (observation,) = [
                e
                for e in result.asset_events
                if e.asset_key == realtime_key("traffic_by_org")
                and isinstance(e, dg.AssetObservation)
            ]
            from_sensor = json.loads(json.dumps(observation.metadata["task_status"].value))
            from_status = control.update(task_lags([status]))
            seen.append((from_sensor[TASK], from_status[TASK]))
            # a bucket of factor 2 owns half of its partition's gap
            assert observation.metadata["backlog"].value == -(-(end - offset) // 2)
    finally:
        store.close()
    assert [s for s, _ in seen] == [t for _, t in seen], seen
    assert all(s == "OK" for s, _ in seen), seen
    assert "pipeline alert" not in caplog.text


def test_a_current_view_is_marked_every_quarter_window_and_a_new_deployment_at_once() -> None:
    """What keeps a realtime view fresh by its policy: a materialization every quarter of the
    window while its tasks report within the SLA, none while they do not; a changed
    definition is recorded at once."""
    from orchestration.sensors.realtime_lag import realtime_materializations
    from pipelines.views import ResolvedView

    view = next(v for v in example_views() if v.name == "traffic_by_org")
    status = TaskStatus(task="events:0", topic="events", partition=0, worker_id="w", pid=1)
    resolved = {view.name: ResolvedView(view, "Enabled", "file data/views.yaml", 100.0)}
    cursor: dict = {}

    def tick(at: float, passing: bool = True, reported_at: float | None = None) -> list:
        """One tick at ``at``; the task reported a second before unless ``reported_at``."""
        heartbeat = at - 1 if reported_at is None else reported_at
        statuses = [dataclasses.replace(status, heartbeat_at=heartbeat)]
        return realtime_materializations(
            [view], statuses, resolved, {}, {view.name: passing}, cursor, mark_every_s=150, now=at
        )

    (first,) = tick(10_000)
    assert first.metadata["why"].value == "fleet started"
    assert tick(10_100) == []  # a quarter window has not passed
    (mark,) = tick(10_151)
    assert mark.metadata["why"].value == "stream current"
    assert tick(10_400, passing=False) == []  # behind its SLA: not current
    assert tick(10_500, reported_at=10_300) == []  # not reporting: nothing, overdue soon
    (again,) = tick(10_600)
    assert again.metadata["why"].value == "fleet started"  # back after a stop
    resolved[view.name] = ResolvedView(view, "Running", "deployment", 950.0)
    (deployed,) = tick(10_620, passing=False)
    assert deployed.metadata["why"].value == "deployed"
    assert deployed.metadata["source"].value == "deployment"
