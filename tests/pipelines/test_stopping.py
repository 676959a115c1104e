"""A process told to stop exits within its stop deadline, whatever its main thread waits on;
a second signal ends it at once. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.processes import wait_until

STUCK = """
import signal, sys, threading, time
from pipelines.stopping import StopDeadline, on_stop_signals
stop = threading.Event()
deadline = StopDeadline({deadline}, "stuck", last_step=lambda: print("last step", flush=True),
                        exit_code=3)
on_stop_signals(stop, deadline, then=lambda signum: print("stopping", flush=True))
print("ready", flush=True)
lock = threading.Lock()
lock.acquire()
lock.acquire()  # waits for good
"""


def _start(tmp_path: Path, deadline_s: float) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "out.log"
    process = subprocess.Popen(
        [sys.executable, "-c", STUCK.format(deadline=deadline_s)],
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parents[2],
    )
    wait_until(lambda: "ready" in out.read_text(), 30, "the process to be ready")
    return process, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stuck_process_exits_at_its_stop_deadline_after_its_last_step(tmp_path, sig) -> None:
    process, out = _start(tmp_path, 1.0)
    try:
        started = time.monotonic()
        os.kill(process.pid, sig)
        assert process.wait(timeout=10) == 3
        took = time.monotonic() - started
    finally:
        process.kill()
    assert 0.9 <= took <= 3.0, took
    assert "last step" in out.read_text()


def test_a_second_signal_gives_up_at_once(tmp_path) -> None:
    process, out = _start(tmp_path, 60.0)
    try:
        os.kill(process.pid, signal.SIGTERM)
        wait_until(lambda: "stopping" in out.read_text(), 10, "the first signal's handler")
        started = time.monotonic()
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=10) == 3
        assert time.monotonic() - started <= 2.0
    finally:
        process.kill()
