"""`sluice up` as a newcomer sees it: in a real terminal (tmux), progress while the replay runs,
a clear line when it is done, no ERROR line or traceback, exit 0; a broker it did not start
is used and left running."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pipelines.kafka import EmbeddedBroker
from pipelines.kafka.embedded import pid_alive
from tests.fixtures.processes import PROJECT, wait_until

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


def test_up_shows_progress_finishes_cleanly_and_leaves_a_broker_it_did_not_start(
    tmp_path: Path, tmux: Tmux, own_broker
) -> None:
    state = tmp_path / "state"
    exit_file = tmp_path / "exit-code"
    env = {
        "SLUICE_STATE_DIR": str(state),
        "PYTHONPATH": str(PROJECT),
        "SLUICE_STATUS_INTERVAL_S": "1",
    }
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    command = (
        f"env -u KAFKA_BOOTSTRAP_SERVERS {exports} {sys.executable} -m orchestration.cli up "
        "--no-dagster --exit-when-done --agents 2 --duration 40m --speedup 120 "
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
        f"{command}; sleep 600",
    )
    try:
        # While the replay runs, the panel shows its progress with an ETA.
        progress = wait_until(
            lambda: next(
                (
                    line
                    for line in tmux.screen().splitlines()
                    if "replay  nyc_taxi:" in line and "ETA" in line
                ),
                None,
            ),
            60,
            "the replay's progress line",
        )
        assert "h simulated" in progress and "msgs" in progress, progress
        wait_until(exit_file.exists, 150, "up to exit once the fleet caught up")
    finally:
        screen = tmux.screen()
        (tmp_path / "screen.txt").write_text(screen)
    assert exit_file.read_text().strip() == "0", screen[-3000:]
    assert "done: replayed" in screen and "the fleet caught up" in screen, screen[-3000:]
    assert "stopped" in screen
    for noise in ("ERROR", "Traceback"):
        assert noise not in screen, screen
    assert f"using the running embedded broker pid {own_broker.pid}" in screen
    assert pid_alive(own_broker.pid), "up stopped a broker it did not start"
    log = (state / "logs" / "sluice.log").read_text()
    assert "agent" in log and " INFO " in log  # the full log is in the file, not on screen
    assert _processes_of(state) == [], "up left processes behind"


def _processes_of(state: Path) -> list[int]:
    """PIDs of live processes whose environment names ``state`` (up's children)."""
    marker = f"SLUICE_STATE_DIR={state}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(proc.name))
    return found
