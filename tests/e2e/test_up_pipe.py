"""`sluice up 2>&1 | tee up.log`, then Ctrl-C: the SIGINT reaches tee too, so up's output pipe
breaks while it stops its children. Stopping them must not depend on being able to say so."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.processes import MARK, PROJECT, marked, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.broker]


def test_up_whose_output_pipe_breaks_still_stops_every_child(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    (tmp_path / "cwd").mkdir()
    env = {
        **os.environ,
        MARK: mark,
        "PYTHONPATH": str(PROJECT),
        "SLUICE_STATE_DIR": str(tmp_path / "state"),
        "SLUICE_PARTITIONS": "2",
    }
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # up starts its own embedded broker
    args = ["up", "--no-dagster", "--agents", "1", "--duration", "6h", "--peak-rate", "200"]
    up = subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", *args],
        env=env,
        cwd=tmp_path / "cwd",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,  # the pipe into tee
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        seen = b""
        deadline = time.monotonic() + 120
        while b"replaying" not in seen:  # broker, agent and generator have started
            line = up.stdout.readline()
            assert line and time.monotonic() < deadline, seen.decode(errors="replace")
            seen += line
        wait_until(lambda: len(marked(mark)) >= 4, 60, "up, the broker, an agent, the generator")
        up.stdout.close()  # tee dies with the Ctrl-C: nobody reads up's output any more
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=40)
        wait_until(lambda: not marked(mark), 10, "no process up started left")
    finally:
        for pid in marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
