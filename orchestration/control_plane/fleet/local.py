"""A fleet of agents on this machine, supervised: what `sluice stream` and `sluice up` run.

Each agent is a `sluice agent` process, the same program that runs on other machines; the job
model in the control store decides which agent runs which task. The supervisor restarts an
agent that dies. A loss (killed by a signal: SIGKILL, the OOM killer, a reclaimed machine) is
always restarted and never counted, and is recorded in the control store at once so the
coordinator moves its tasks without waiting for the heartbeat to age. A crash (the agent
exited with an error of its own) counts, and like Mist's scheduler the supervisor gives up on an
agent that crashed three times within ten minutes; its tasks run on the other agents.

That rule is for faults of the agent or its host, never of the data: a bad setting, a views
file that does not load, a control store or storage it cannot reach at start, a bug outside
the processing of records. Input cannot make an agent exit: every exception while a task
processes records crashes that task alone, inside the agent, which restarts it and quarantines
the record that keeps crashing it (:mod:`pipelines.control.crashes`); so an agent is never
given up on for what its tasks read, and the next agent would not meet the same record.

Stopping sends SIGTERM (each agent checkpoints and releases its tasks), then SIGKILL after a
deadline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from orchestration.control_plane.fleet.coordinator import COORDINATOR_LEASE
from orchestration.control_plane.processes import signal_stop, start_process, wait_or_kill
from pipelines.control import ControlStore

__all__ = ["AgentProcess", "LocalFleet", "local_agent_ids"]

log = logging.getLogger(__name__)

CRASH_LIMIT = 3
CRASH_WINDOW_S = 600.0


def local_agent_ids(count: int, prefix: str | None = None) -> list[str]:
    """``HOST-a0`` ... : unique across machines that share a control store."""
    prefix = prefix if prefix is not None else f"{socket.gethostname().split('.')[0]}-a"
    return [f"{prefix}{i}" for i in range(count)]


@dataclass
class AgentProcess:
    agent_id: str
    process: subprocess.Popen | None = None
    crashes: deque = field(default_factory=lambda: deque(maxlen=CRASH_LIMIT))
    disabled: bool = False
    started_at: float = 0.0
    """Wall-clock time of the last spawn (registration is awaited against it)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class LocalFleet:
    def __init__(
        self,
        agent_ids: Sequence[str],
        *,
        topic: str | None = None,
        views_file: str | Path | None = None,
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        control: ControlStore | None = None,
    ) -> None:
        if not agent_ids:
            raise ValueError("a fleet needs at least one agent")
        self.topic = topic
        self.views_file = str(views_file) if views_file else None
        self.env = {**os.environ, **(env or {})}
        self.log_dir = log_dir
        self.control = control
        self.prefix = agent_ids[0].rstrip("0123456789")
        """New agents of :meth:`rescale` are named like the first: ``<prefix><n>``."""
        self.agents: dict[str, AgentProcess] = {a: AgentProcess(a) for a in agent_ids}
        self.closed = False
        """Set by :meth:`close`: nothing starts any more (the supervisor may still be ticking
        in another thread while the main thread stops the fleet)."""
        self._lock = threading.Lock()

    def _command(self, agent: AgentProcess) -> list[str]:
        cmd = [sys.executable, "-m", "orchestration.cli", "agent", "--id", agent.agent_id]
        if self.topic:
            cmd += ["--topic", self.topic]
        if self.views_file:
            cmd += ["--views", self.views_file]
        return cmd

    def _spawn(self, agent: AgentProcess) -> None:
        log_file = self.log_dir / f"agent-{agent.agent_id}.log" if self.log_dir else None
        with self._lock:  # against close() from another thread: no agent starts after it
            if self.closed:
                return
            agent.started_at = time.time()
            agent.process = start_process(self._command(agent), self.env, log_file)
        log.info("started agent %s (pid %d)", agent.agent_id, agent.pid)

    def start(self) -> None:
        for agent in self.agents.values():
            self._spawn(agent)

    def _record_loss(self, agent: AgentProcess, why: str) -> None:
        if self.control is None:
            return
        try:
            self.control.jobs.set_agent_state(agent.agent_id, "lost", why)
            # if it held the coordinator lease, the next agent need not wait for it to expire
            self.control.jobs.release_lease(COORDINATOR_LEASE, agent.agent_id)
        except SQLAlchemyError as exc:  # the heartbeat ages anyway; the coordinator sees it then
            log.warning("cannot record the loss of agent %s: %s", agent.agent_id, exc)

    def supervise(self) -> list[str]:
        """Restart dead agents; returns what happened, for the caller to show."""
        events: list[str] = []
        if self.closed:  # stopping: an agent that exits now is not lost
            return events
        now = time.monotonic()
        for agent in self.agents.values():
            if agent.disabled or agent.process is None or agent.alive():
                continue
            code = agent.process.returncode
            if code < 0:  # killed by a signal: a loss, restarted whatever happened before
                self._record_loss(agent, f"pid {agent.pid} killed by signal {-code}")
                events.append(
                    f"agent {agent.agent_id} lost (signal {-code}): its tasks move to live "
                    "agents; restarting it"
                )
                log.warning(events[-1])
                self._spawn(agent)
                continue
            self._record_loss(agent, f"pid {agent.pid} exited {code}")
            agent.crashes.append(now)
            recent = [t for t in agent.crashes if now - t <= CRASH_WINDOW_S]
            if len(recent) >= CRASH_LIMIT:
                agent.disabled = True
                events.append(
                    f"agent {agent.agent_id} exited {code} {CRASH_LIMIT} times in "
                    f"{CRASH_WINDOW_S / 60:.0f} min: not restarted (its tasks run elsewhere)"
                )
                log.error(events[-1])
                continue
            events.append(f"agent {agent.agent_id} exited {code}: restarting")
            log.warning(events[-1])
            self._spawn(agent)
        return events

    def restart(self, reason: str, timeout_s: float = 20.0) -> None:
        """Stop every agent (each checkpoints and releases) and start them again."""
        log.info("restarting the fleet: %s", reason)
        self.stop(timeout_s)
        for agent in self.agents.values():
            agent.disabled = False
            agent.crashes.clear()
            self._spawn(agent)

    def rescale(self, count: int, timeout_s: float = 30.0) -> list[str]:
        """Run ``count`` agents: new ones are started and awaited until they have registered
        (the coordinator then hands tasks over to them through checkpoints); surplus ones stop
        gracefully, releasing their tasks at a checkpoint first. Returns the agents now run."""
        if count < 1:
            raise ValueError(f"need at least one agent, got {count}")
        ids = local_agent_ids(max(count, len(self.agents)), self.prefix)
        surplus = [a for a in ids[count:] if a in self.agents]
        for agent_id in surplus:
            signal_stop(self.agents[agent_id].process)
        deadline = time.monotonic() + timeout_s
        for agent_id in surplus:
            if wait_or_kill(self.agents[agent_id].process, deadline - time.monotonic()):
                log.warning("agent %s did not stop in %.0fs: SIGKILL", agent_id, timeout_s)
            del self.agents[agent_id]
        new = [a for a in ids[:count] if a not in self.agents]
        for agent_id in new:
            self.agents[agent_id] = AgentProcess(agent_id)
            self._spawn(self.agents[agent_id])
        self.await_registration(new, deadline)
        return sorted(self.agents)

    def await_registration(self, agent_ids: Sequence[str], deadline: float) -> None:
        """Wait until ``agent_ids`` registered after their spawn (Guardian's wait)."""
        if self.control is None or not agent_ids:
            return
        while time.monotonic() < deadline:
            registered = {
                a.agent_id
                for a in self.control.jobs.agents()
                if a.agent_id in self.agents
                and a.state == "running"
                and a.started_at >= self.agents[a.agent_id].started_at - 1
            }
            if set(agent_ids) <= registered:
                return
            time.sleep(0.2)
        log.warning("agents %s did not register in time", sorted(agent_ids))

    def pids(self) -> dict[str, int | None]:
        return {a: p.pid for a, p in self.agents.items()}

    def stop(self, timeout_s: float = 20.0) -> None:
        agents = list(self.agents.values())
        for agent in agents:
            signal_stop(agent.process)
        deadline = time.monotonic() + timeout_s
        for agent in agents:
            if wait_or_kill(agent.process, deadline - time.monotonic()):
                log.warning("agent %s did not stop in %.0fs: SIGKILL", agent.agent_id, timeout_s)

    def close(self, timeout_s: float) -> None:
        """Stop every agent for good (SIGTERM, SIGKILL of its group after ``timeout_s``);
        safe while another thread supervises: nothing is started after it."""
        with self._lock:
            self.closed = True
        self.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL every agent's process group now: a supervisor that gives up on its stop
        leaves no agent behind."""
        with self._lock:
            self.closed = True
        for agent in list(self.agents.values()):
            if agent.process is not None and agent.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.process.pid, signal.SIGKILL)
