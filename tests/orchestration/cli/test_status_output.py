"""`sluice status` into a file or a pipe prints once and exits; on a terminal it stays live."""

from __future__ import annotations

import subprocess
import sys
import time

from pipelines.control import ControlStore, TaskStatus
from tests.fixtures.processes import PROJECT


def test_status_into_a_pipe_prints_the_tables_once_and_exits(tmp_path) -> None:
    state = tmp_path / "state"
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
