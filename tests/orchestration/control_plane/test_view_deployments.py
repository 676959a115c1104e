"""Deploying a view (from Dagster) changes what the agents run: the supervisor says so and
marks the deployment Running; each agent reloads (tests/e2e/test_agents.py)."""

from __future__ import annotations

import yaml

from orchestration.control_plane.fleet import DeploymentWatcher
from orchestration.control_plane.runtime import Runtime
from pipelines.config import PROJECT_ROOT, KafkaSettings


class RecordingFleet:
    """A fleet the watcher must not restart (agents reload the views themselves)."""

    def __init__(self):
        self.restarts = []

    def restart(self, reason):
        self.restarts.append(reason)


def _definition(name: str, interval: str) -> dict:
    return {
        "name": name,
        "topic": "events",
        "grouping_cols": ["org"],
        "interval": interval,
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
    }


def test_deployed_definitions_override_the_file_and_are_announced(settings):
    runtime = Runtime(settings, KafkaSettings())
    file_views = {v.name for v in runtime.views()}
    fleet = RecordingFleet()
    watcher = DeploymentWatcher(runtime, fleet, every_s=0)
    assert watcher.check() == []

    runtime.control.deploy_view("per_minute", "fp1", _definition("per_minute", "1m"))
    (event,) = watcher.check()
    assert "every agent reloads" in event and fleet.restarts == []
    active = {v.name: v for v in runtime.active_views()}
    assert set(active) == file_views | {"per_minute"}
    assert active["per_minute"].interval_ms == 60_000
    assert runtime.control.deployed_views()[0]["state"] == "Running"

    # the same definition again changes nothing
    assert (
        runtime.control.deploy_view("per_minute", "fp1", _definition("per_minute", "1m")) is False
    )
    assert watcher.check() == []

    # disabling a file view removes it from what workers run
    shipped = yaml.safe_load((PROJECT_ROOT / "data" / "views.yaml").read_text())["views"][0]
    runtime.control.deploy_view(shipped["name"], "fp2", shipped)
    runtime.control.set_view_state(shipped["name"], "Disabled")
    assert watcher.check() and fleet.restarts == []
    assert shipped["name"] not in {v.name for v in runtime.active_views()}
