"""One rule for what a view is and whether it runs: the newest change wins, file or deployment.

So a view disabled in views.yaml after it was deployed stops (the deployment does not always
win), and `sluice query` resolves a view from file and deployments alike (from the file only,
after a deployment with another definition, every realtime segment would be skipped).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml

from orchestration.cli import main
from orchestration.control_plane.runtime import Runtime
from pipelines.config import KafkaSettings, SluiceSettings

VIEW = {
    "name": "per_org",
    "topic": "events",
    "grouping_cols": ["org"],
    "interval": "10m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
}


def _write(path: Path, *views: dict, at: float) -> None:
    path.write_text(yaml.safe_dump({"views": list(views)}))
    os.utime(path, (at, at))


def _runtime(tmp_path: Path) -> Runtime:
    settings = SluiceSettings(state_dir=tmp_path / "state", views_file=tmp_path / "views.yaml")
    return Runtime(settings, KafkaSettings())


def test_disabling_a_deployed_view_in_the_file_stops_it(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    views_file = tmp_path / "views.yaml"
    _write(views_file, VIEW, at=time.time() - 3600)
    runtime.control.deploy_view("per_org", "fp-deployed", {**VIEW, "interval": "5m"})
    assert [v.interval_ms for v in runtime.active_views()] == [300_000]  # deployment is newer

    deployed_at = runtime.control.deployed_views()[0]["deployed_at"]
    _write(views_file, {**VIEW, "disabled": True}, at=deployed_at + 0.001)  # operator disables it
    assert runtime.active_views() == []
    (resolved,) = runtime.resolved_views().values()
    assert resolved.state == "Disabled" and resolved.source == f"file {views_file}"

    while time.time() <= deployed_at + 0.001:  # the next deployment is newer than the edit
        pass
    runtime.control.deploy_view("per_org", "fp-again", {**VIEW, "interval": "1m"})
    (again,) = runtime.active_views()  # a newer deployment runs it again
    assert again.interval_ms == 60_000
    assert runtime.resolved_views()["per_org"].source == "deployment"


def test_a_view_disabled_by_deployment_state_stays_disabled_until_a_newer_change(
    tmp_path: Path,
) -> None:
    runtime = _runtime(tmp_path)
    _write(tmp_path / "views.yaml", VIEW, at=time.time() - 3600)
    runtime.control.deploy_view("per_org", "fp", VIEW)
    runtime.control.set_view_state("per_org", "Disabled")
    assert runtime.active_views() == []
    assert runtime.resolved_views()["per_org"].state == "Disabled"


def test_query_resolves_the_deployed_definition_the_workers_run(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    _write(tmp_path / "views.yaml", VIEW, at=time.time() - 3600)
    deployed = {**VIEW, "interval": "5m"}
    runtime.control.deploy_view("per_org", "fp", deployed)
    (worker_view,) = runtime.active_views()
    query_view = runtime.view("per_org")
    assert query_view.fingerprint == worker_view.fingerprint
    assert query_view.interval_ms == 300_000


def test_status_shows_each_views_state_and_source(tmp_path: Path, monkeypatch, capsys) -> None:
    runtime = _runtime(tmp_path)
    _write(
        tmp_path / "views.yaml",
        VIEW,
        {**VIEW, "name": "quiet", "disabled": True},
        at=time.time() - 3600,
    )
    runtime.control.deploy_view("per_org", "fp", {**VIEW, "interval": "5m"})
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLUICE_VIEWS_FILE", str(tmp_path / "views.yaml"))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)  # no broker: reports only
    from pipelines.config import get_settings

    get_settings.cache_clear()
    try:
        assert main(["status", "--once"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    per_org = next(line for line in out.splitlines() if "per_org" in line)
    quiet = next(line for line in out.splitlines() if "quiet" in line)
    assert "Running" in per_org or "Scheduled" in per_org or "Waiting" in per_org
    assert "deployment" in per_org
    assert "Disabled" in quiet and "file" in quiet


def test_the_code_location_corrects_the_definition_in_force(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    views_file = tmp_path / "views.yaml"
    _write(views_file, VIEW, {**VIEW, "name": "other"}, at=time.time() - 3600)
    deployed = {**VIEW, "interval": "5m"}
    runtime.control.deploy_view("per_org", "fp", deployed)
    runtime.control.deploy_view("other", "fp2", {**VIEW, "name": "other"})
    runtime.control.set_view_state("other", "Disabled")
    views, definitions = runtime.views_in_force(views_file)
    by_name = {v.name: v for v in views}
    assert by_name["per_org"].fingerprint == runtime.view("per_org").fingerprint
    assert by_name["per_org"].interval_ms == 300_000 and definitions["per_org"] == deployed
    assert by_name["other"].disabled


def test_editing_the_views_file_the_fleet_runs_is_noticed(tmp_path: Path) -> None:
    """The supervisor watches the file the agents were given (not SLUICE_VIEWS_FILE) and says
    when it changes; each agent reloads it itself (tests/e2e/test_agents.py)."""
    from orchestration.control_plane.fleet import DeploymentWatcher

    class RecordingFleet:
        views_file = str(tmp_path / "views.yaml")

        def __init__(self) -> None:
            self.restarts: list[str] = []

        def restart(self, reason: str) -> None:
            self.restarts.append(reason)

    runtime = _runtime(tmp_path)
    _write(tmp_path / "views.yaml", VIEW, at=time.time() - 3600)
    runtime.settings.views_file = tmp_path / "elsewhere.yaml"  # the fleet was given --views
    _write(runtime.settings.views_file, VIEW, at=time.time() - 3600)
    fleet = RecordingFleet()
    watcher = DeploymentWatcher(runtime, fleet, every_s=0)
    assert watcher.check() == []
    _write(tmp_path / "views.yaml", {**VIEW, "disabled": True}, at=time.time())
    (event,) = watcher.check()
    assert "every agent reloads" in event and fleet.restarts == []
    assert runtime.active_views(fleet.views_file) == []
