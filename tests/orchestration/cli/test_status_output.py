"""`sluice status` into a file or a pipe prints once and exits; on a terminal it stays live."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from pipelines.control import ControlStore, TaskStatus
from pipelines.segments import record_change
from pipelines.storage import LocalObjectStore
from pipelines.views import load_views
from tests.fixtures.processes import PROJECT


def _one_task_reported(state: Path) -> Path:
    """A state directory whose control store has one live task, events:0, on agent a0."""
    store = ControlStore(f"sqlite:///{state / 'control.db'}")
    store.report_tasks(
        [
            TaskStatus(
                task="events:0",
                topic="events",
                partition=0,
                worker_id="a0",
                pid=1,
                heartbeat_at=time.time(),
            )
        ]
    )
    store.close()
    return state


def test_status_into_a_pipe_prints_the_tables_once_and_exits(tmp_path) -> None:
    state = _one_task_reported(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "status"],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": str(PROJECT),
            "SLUICE_STATE_DIR": str(state),
            "COLUMNS": "200",
        },
        capture_output=True,  # stdout is a pipe, not a terminal: no live refresh
        text=True,
        timeout=60,  # a status that refreshed forever on a pipe would never return
    )
    assert done.returncode == 0, done.stderr
    assert "events:0" in done.stdout and "tasks" in done.stdout
    assert "\x1b[?25l" not in done.stdout  # no live display (it hides the cursor)


def test_status_shows_each_views_table_lag(tmp_path) -> None:
    state = tmp_path / "state"
    storage = LocalObjectStore(state / "storage")
    old = int((time.time() - 900) * 1000)  # a flush 15 minutes ago the publisher never took
    record_change(storage, "traffic_by_org", [0], "events", 0, 1, at_ms=old)
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "status"],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": str(PROJECT),
            "SLUICE_STATE_DIR": str(state),
            "COLUMNS": "200",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "table lag" in done.stdout
    names = {v.name for v in load_views(PROJECT / "data" / "views.yaml")}
    rows = {
        cells[1]: line
        for line in done.stdout.splitlines()
        if len(cells := line.split()) > 1 and cells[1] in names
    }
    assert re.search(r"│\s*1[56]\.\dm\s*│$", rows.pop("traffic_by_org"))
    assert rows and all(re.search(r"│\s*0\.0s\s*│$", line) for line in rows.values()), rows


def test_status_json_carries_each_views_table_lag(tmp_path) -> None:
    """A task's row in ``--json`` carries the table lag of each view of its topic: what the
    Views table shows."""
    state = _one_task_reported(tmp_path / "state")
    storage = LocalObjectStore(state / "storage")
    old = int((time.time() - 900) * 1000)  # a flush 15 minutes ago the publisher never took
    record_change(storage, "traffic_by_org", [0], "events", 0, 1, at_ms=old)
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "status", "--json"],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": str(PROJECT),
            "SLUICE_STATE_DIR": str(state),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    names = {v.name for v in load_views(PROJECT / "data" / "views.yaml") if v.topic == "events"}
    lags = row["table_lag_s"]
    assert set(lags) == names
    assert 900 <= lags.pop("traffic_by_org") < 960
    assert lags and all(lag == 0.0 for lag in lags.values()), lags
