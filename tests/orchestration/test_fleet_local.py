"""Loss never disables a worker; crashes do, three in ten minutes (Mist's rule).

Seen by a user: a worker SIGKILLed three times within ten minutes (what a reclaimed spot
machine or the OOM killer does) was disabled for good and half the topic was never processed
again.
"""

from __future__ import annotations

import os
import signal
import sys

from orchestration.fleet.local import CRASH_LIMIT, LocalFleet
from orchestration.job_model import plan_job_model
from pipelines.stream import TaskId


class ScriptedFleet(LocalFleet):
    """A local fleet whose workers run ``script`` instead of `sluice worker`."""

    def __init__(self, script: str) -> None:
        super().__init__(plan_job_model([TaskId("events", 0)], 1))
        self.script = script

    def _command(self, worker) -> list[str]:
        return [sys.executable, "-c", self.script]


def test_a_worker_killed_again_and_again_is_always_restarted() -> None:
    fleet = ScriptedFleet("import time; time.sleep(120)")
    fleet.start()
    try:
        (worker,) = fleet.workers.values()
        for _ in range(CRASH_LIMIT + 2):
            pid = worker.pid
            os.kill(pid, signal.SIGKILL)
            worker.process.wait(timeout=10)
            (event,) = fleet.supervise()
            assert "lost (signal 9)" in event
            assert not worker.disabled and worker.alive() and worker.pid != pid
    finally:
        fleet.stop(timeout_s=5)
    assert not worker.alive()


def test_a_worker_that_crashes_three_times_in_ten_minutes_is_disabled() -> None:
    fleet = ScriptedFleet("raise SystemExit(3)")
    fleet.start()
    try:
        (worker,) = fleet.workers.values()
        events = []
        for _ in range(CRASH_LIMIT):
            worker.process.wait(timeout=30)
            events += fleet.supervise()
        assert worker.disabled
        assert events[-1].endswith("disabled") and "exited 3" in events[-1]
    finally:
        fleet.stop(timeout_s=5)
