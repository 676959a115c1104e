"""Loss never stops an agent being restarted; crashes do, three in ten minutes (Mist's rule).

Seen by a user: a worker SIGKILLed three times within ten minutes (what a reclaimed spot
machine or the OOM killer does) was disabled for good and half the topic was never processed
again. A loss is also recorded in the control store at once, so the coordinator need not wait
for the agent's heartbeat to age.
"""

from __future__ import annotations

import os
import signal
import sys

from orchestration.control_plane.fleet.local import CRASH_LIMIT, LocalFleet
from pipelines.control import ControlStore


class ScriptedFleet(LocalFleet):
    """A local fleet whose agents run ``script`` instead of `sluice agent`."""

    def __init__(self, script: str, control: ControlStore | None = None) -> None:
        super().__init__(["a0"], control=control)
        self.script = script

    def _command(self, worker) -> list[str]:
        return [sys.executable, "-c", self.script]


def test_an_agent_killed_again_and_again_is_always_restarted(tmp_path) -> None:
    control = ControlStore(f"sqlite:///{tmp_path / 'control.db'}")
    control.jobs.register_agent("a0", "here", 1, "events")
    fleet = ScriptedFleet("import time; time.sleep(120)", control)
    fleet.start()
    try:
        (worker,) = fleet.agents.values()
        for _ in range(CRASH_LIMIT + 2):
            pid = worker.pid
            os.kill(pid, signal.SIGKILL)
            worker.process.wait(timeout=10)
            (event,) = fleet.supervise()
            assert "lost (signal 9)" in event
            assert not worker.disabled and worker.alive() and worker.pid != pid
            (agent,) = control.jobs.agents()
            assert agent.state == "lost"  # recorded at once for the coordinator
            control.jobs.register_agent("a0", "here", worker.pid, "events")
    finally:
        fleet.stop(timeout_s=5)
        control.close()
    assert not worker.alive()


def test_an_agent_that_crashes_three_times_in_ten_minutes_is_not_restarted() -> None:
    fleet = ScriptedFleet("raise SystemExit(3)")
    fleet.start()
    try:
        (worker,) = fleet.agents.values()
        events = []
        for _ in range(CRASH_LIMIT):
            worker.process.wait(timeout=30)
            events += fleet.supervise()
        assert worker.disabled
        assert "not restarted" in events[-1] and "exited 3" in events[-1]
    finally:
        fleet.stop(timeout_s=5)
