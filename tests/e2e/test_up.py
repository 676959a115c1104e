"""`sluice up` as a newcomer sees it: in a real terminal (tmux), progress while the replay runs,
a clear line when it is done, no ERROR line or traceback, exit 0; a broker it did not start
is used and left running."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestration.control_plane.processes import with_environment
from pipelines.control import ControlStore
from pipelines.kafka import EmbeddedBroker
from pipelines.kafka.embedded import pid_alive
from tests.fixtures.processes import PROJECT, wait_until
from tests.fixtures.stream import read_records

pytestmark = pytest.mark.e2e


class Tmux:
    """One detached tmux server of its own (``-L``), killed at the end."""

    def __init__(self) -> None:
        self.socket = f"sluice-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        return done.stdout

    def screen(self) -> str:
        """Everything the pane showed, scroll-back included."""
        return self("capture-pane", "-p", "-J", "-S", "-5000", "-t", "up")

    def kill(self) -> None:
        self("kill-server")


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.fail("tmux is required for the terminal test: sudo apt-get install -y tmux")
    terminal = Tmux()
    yield terminal
    terminal.kill()


@pytest.fixture
def own_broker(tmp_path: Path):
    """A broker started by someone else (as `sluice broker start` does) in up's state dir."""
    broker = EmbeddedBroker(tmp_path / "state")
    info = broker.start()
    yield info
    broker.stop()


ASSET = """
query Asset($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      freshnessStatusInfo { freshnessStatus }
      partitionKeysByDimension { partitionKeys }
    }
  }
  assetOrError(assetKey: {path: $path}) {
    ... on Asset {
      assetMaterializations(limit: 1) {
        metadataEntries { label ... on TextMetadataEntry { text } }
      }
    }
  }
}
"""
SCALING_RUNS = """
query Runs {
  runsOrError(filter: {pipelineName: "scale_stream_workers"}, limit: 20) {
    ... on Runs { results { runId status tags { key value } } }
  }
}
"""
OBSERVATIONS = """
query Observed {
  assetOrError(assetKey: {path: ["events"]}) {
    ... on Asset {
      assetObservations(limit: 50) {
        runId
        metadataEntries {
          label
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
        }
      }
    }
  }
}
"""
AGENTS_LINE = re.compile(r"^agents\s+(\d+) running(?:, planned (\d+))?")


def test_up_runs_the_live_half_in_dagster_scales_with_the_traffic_and_stops_cleanly(
    tmp_path: Path, tmux: Tmux, own_broker, artifacts_dir: Path
) -> None:
    """`up` as a newcomer runs it, Dagster included: progress while the replay runs; in the
    UI (GraphQL and Chromium) the realtime views materialized and fresh and the corrected ones
    with the replay's hours; the autoscaler (on by default) rescales the agents as nyc_taxi's
    traffic falls into the night (workers capped at 60 msg/s), the panel's agent count
    follows, and the scaling run's figures agree with `sluice status` and the control store; then a clear
    line when done; Ctrl-C stops it all (exit 130), no ERROR or traceback, no process left, a
    broker it did not start left running."""
    state = tmp_path / "state"
    exit_file = tmp_path / "exit-code"
    env = {
        "SLUICE_STATE_DIR": str(state),
        "PYTHONPATH": str(PROJECT),
        "SLUICE_STATUS_INTERVAL_S": "1",
        "SLUICE_WORKER_MAX_RATE": "60",
        "SLUICE_AUTOMATION_INTERVAL_S": "10",
        "SLUICE_SPARK_WARM_UP": "false",  # its cost on 2 cores: test_spark_server.py has it
    }
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    command = (
        f"env -u KAFKA_BOOTSTRAP_SERVERS {exports} {sys.executable} -m orchestration.cli up "
        "--agents 2 --duration 4h --speedup 240 "
        f"--peak-rate 300 --flush-interval 2; echo $? > {exit_file}"
    )
    tmux(
        "new-session",
        "-d",
        "-s",
        "up",
        "-x",
        "200",
        "-y",
        "60",
        "bash",
        "--norc",
        "-c",
        f"{command}; sleep 900",
    )
    counts: list[int] = []

    def panel() -> str:
        screen = tmux.screen()
        for line in screen.splitlines():
            found = AGENTS_LINE.match(line.strip())
            if found and (not counts or counts[-1] != int(found.group(1))):
                counts.append(int(found.group(1)))
        return screen

    try:
        # While the replay runs, the panel shows its progress with an ETA.
        progress = wait_until(
            lambda: next(
                (
                    line
                    for line in panel().splitlines()
                    if "replay  nyc_taxi:" in line and "ETA" in line
                ),
                None,
            ),
            240,
            "the replay's progress line",
        )
        assert "h simulated" in progress and "msgs" in progress, progress
        url = re.search(r"Dagster UI: (http://\S+)", panel()).group(1)
        _the_live_half_shows_in_the_ui(url, artifacts_dir, panel, state)
        # the UI stays up until the test has looked (no --exit-when-done); then Ctrl-C
        wait_until(lambda: "done: replayed" in panel(), 420, "the fleet to catch up")
        # the replay marked where its input ended: the topic's ends as another client reads them
        control = ControlStore(f"sqlite:///{state / 'control.db'}")
        try:
            end = control.input_ends.of_topic("events")
        finally:
            control.close()
        records = read_records(own_broker.bootstrap, "events", 4)
        assert end is not None and dict(end.end_offsets) == {
            p: rs[-1].offset + 1 for p, rs in records.items()
        }, end
        tmux("send-keys", "-t", "up", "C-c")
        wait_until(exit_file.exists, 60, "up to stop on Ctrl-C")
    finally:
        screen = tmux.screen()
        (tmp_path / "screen.txt").write_text(screen)
        (artifacts_dir / "up-screen.txt").write_text(screen)
    assert exit_file.read_text().strip() == "130", screen[-3000:]
    assert "done: replayed" in screen and "the fleet caught up" in screen, screen[-3000:]
    assert "stopped" in screen
    for noise in ("ERROR", "Traceback"):
        assert noise not in screen, screen
    assert f"using the running embedded broker pid {own_broker.pid}" in screen
    assert pid_alive(own_broker.pid), "up stopped a broker it did not start"
    log = (state / "logs" / "sluice.log").read_text()
    assert "agent" in log and " INFO " in log  # the full log is in the file, not on screen
    assert _processes_of(state) == [], "up left processes behind"
    # the autoscaler rescaled the fleet and the panel's count followed it
    assert "rescaled 2 -> " in screen, screen[-3000:]
    assert counts[0] == 2 and len(set(counts)) >= 2, counts


def _the_live_half_shows_in_the_ui(url: str, artifacts_dir: Path, panel, state: Path) -> None:
    from playwright.sync_api import expect

    from orchestration.control_plane.dagster_service import graphql
    from tests.fixtures.browser import chromium_page

    def asset(name: str) -> dict:
        return graphql(url, ASSET, {"path": [name]})

    # the realtime view: its deployment recorded as a materialization, fresh by its policy
    def realtime_fresh() -> dict | None:
        answer = asset("realtime_traffic_by_org")
        made = answer["assetOrError"]["assetMaterializations"]
        status = answer["assetNodeOrError"]["freshnessStatusInfo"]["freshnessStatus"]
        return made[0] if made and status == "HEALTHY" else None

    made = wait_until(lambda: panel() and realtime_fresh(), 180, "realtime view fresh")
    metadata = {e["label"]: e.get("text") for e in made["metadataEntries"]}
    assert metadata["why"] in ("fleet started", "deployed", "stream current"), metadata
    assert metadata["source"].startswith("file "), metadata
    # the corrected view's partitions: the replay's four hours of 2014-07-01, not twelve years
    keys = asset("corrected_traffic_by_org")["assetNodeOrError"]["partitionKeysByDimension"]
    assert keys[0]["partitionKeys"] == [f"2014-07-01-{h:02d}:00" for h in range(4)], keys

    catalog = artifacts_dir / "up-asset-catalog.png"
    realtime = artifacts_dir / "up-realtime-asset.png"
    lineage = artifacts_dir / "up-asset-lineage.png"
    with chromium_page(1600, 2400, lineage) as page:
        page.goto(f"{url}/assets")
        expect(page.get_by_text("realtime_traffic_by_org").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile(r"^Loading"))).to_have_count(0, timeout=60_000)
        page.screenshot(path=str(catalog), full_page=True)
        page.goto(f"{url}/assets/realtime_traffic_by_org")
        expect(page.get_by_text("Freshness policy").first).to_be_visible(timeout=60_000)
        page.screenshot(path=str(realtime), full_page=True)
        page.goto(f"{url}/locations/sluice/asset-groups/views/lineage")
        expect(page.get_by_text("realtime_traffic_by_org").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text("corrected_traffic_by_org").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile(r"^Loading"))).to_have_count(0, timeout=60_000)
    for shot in (catalog, realtime, lineage):
        assert shot.stat().st_size > 10_000, shot

    # the topic observed by the events_offsets sensor: offsets per partition and write rate
    def topic_observed() -> dict | None:
        observed = graphql(url, OBSERVATIONS)["assetOrError"]["assetObservations"]
        for o in observed:
            entries = {e["label"]: e for e in o["metadataEntries"]}
            if "rate_per_s" in entries and not o["runId"]:
                return entries
        return None

    entries = wait_until(lambda: panel() and topic_observed(), 120, "events observed")
    assert entries["messages_written"]["intValue"] > 0 and entries["partitions"]["intValue"] == 4
    assert entries["rate_per_s"]["floatValue"] >= 0

    # a scaling run that the autoscaler launched and the supervisor carried out
    def scaled() -> dict | None:
        runs = graphql(url, SCALING_RUNS)["runsOrError"]["results"]
        done = [r for r in runs if r["status"] == "SUCCESS"]
        return done[0] if done else None

    run = wait_until(lambda: panel() and scaled(), 300, "a scaling run by the autoscaler")
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["dagster/sensor_name"] == "autoscaler", tags
    observed = graphql(url, OBSERVATIONS)["assetOrError"]["assetObservations"]
    (mine,) = [o for o in observed if o["runId"] == run["runId"]]
    figures = {e["label"]: e.get("intValue") for e in mine["metadataEntries"]}
    assert figures["workers_after"] == int(tags["sluice/to_workers"]), (figures, tags)
    assert figures["workers_before"] == int(tags["sluice/from_workers"]), (figures, tags)

    # what `sluice status` shows agrees, once no other rescale is under way
    def agreed() -> int | None:
        target = _latest_target(url)
        agents = _status_agents(state)
        return agents if agents == target else None

    agents = wait_until(agreed, 120, "sluice status to show the scaled fleet")
    control = ControlStore(f"sqlite:///{state / 'control.db'}")
    try:
        assert control.scaling("events")["applied_workers"] == agents
    finally:
        control.close()


def _latest_target(url: str) -> int | None:
    from orchestration.control_plane.dagster_service import graphql

    runs = graphql(url, SCALING_RUNS)["runsOrError"]["results"]
    done = [r for r in runs if r["status"] == "SUCCESS"]
    if not done:
        return None
    tags = {t["key"]: t["value"] for t in done[0]["tags"]}
    return int(tags["sluice/to_workers"])


def _status_agents(state: Path) -> int:
    """Agents owning Running tasks, as `sluice status --json` says (same environment as up)."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"},
            "SLUICE_STATE_DIR": str(state),
        },
        cwd=PROJECT,
    )
    rows = json.loads(done.stdout)
    return len({r["agent_id"] for r in rows if r.get("job_state") == "Running"})


def _processes_of(state: Path) -> list[int]:
    """PIDs of live processes whose environment names ``state`` (up's children)."""
    return with_environment(f"SLUICE_STATE_DIR={state}")
