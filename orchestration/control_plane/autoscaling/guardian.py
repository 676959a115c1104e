"""What Metamarkets' Guardian did around a cloud scaling call, over Sluice's job model.

Scaling out is done when the new machines' agents have *registered* in the control store (an
instance InService runs nothing until its agent is up); scaling in first drains the agents
that will go (the coordinator hands their tasks to others through checkpoints) and only then
lets their machines go, so no task waits for a loss to be detected. Backends (Auto Scaling,
ECS) say which machines exist; this module says when the fleet is ready for them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from orchestration.control_plane.autoscaling.exceptions import ScalingTimeout
from pipelines.control import JobModelStore

__all__ = ["AgentGuardian"]

log = logging.getLogger(__name__)


class AgentGuardian:
    def __init__(
        self,
        jobs: JobModelStore,
        loss_after_s: float = 10.0,
        poll_interval_s: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = jobs
        self.loss_after_s = loss_after_s
        self.poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._clock = clock

    def live_agents(self) -> list[str]:
        now = time.time()
        return sorted(
            a.agent_id
            for a in self.jobs.agents()
            if a.state == "running" and a.heartbeat_age_s(now) <= self.loss_after_s
        )

    def load(self) -> dict[str, int]:
        """Agent -> tasks it is scheduled or running."""
        held: dict[str, int] = {}
        for a in self.jobs.assignments():
            if a.agent_id and a.state in ("Scheduled", "Running"):
                held[a.agent_id] = held.get(a.agent_id, 0) + 1
        return held

    def pick_victims(self, candidates: Sequence[str], count: int) -> list[str]:
        """The ``count`` candidates that are cheapest to let go: no agent, then fewest tasks."""
        registered = set(self.live_agents())
        load = self.load()
        ranked = sorted(candidates, key=lambda c: (c in registered, load.get(c, 0), c))
        return ranked[: max(0, count)]

    def await_registered(self, agent_ids: Sequence[str], deadline: float) -> None:
        """Wait until every one of ``agent_ids`` is a live, running agent."""
        wanted = set(agent_ids)
        while True:
            missing = wanted - set(self.live_agents())
            if not missing:
                return
            if self._clock() >= deadline:
                raise ScalingTimeout(
                    f"the agents of {', '.join(sorted(missing))} have not registered in the "
                    "control store in time (is `sluice agent` starting on them, with the "
                    "fleet's SLUICE_CONTROL_STORE_URL?)"
                )
            self._sleep(self.poll_interval_s)

    def await_count(self, count: int, deadline: float) -> list[str]:
        """Wait until at least ``count`` live agents run; returns them."""
        while True:
            live = self.live_agents()
            if len(live) >= count:
                return live
            if self._clock() >= deadline:
                raise ScalingTimeout(
                    f"{len(live)} of {count} agents registered in the control store in time"
                )
            self._sleep(self.poll_interval_s)

    def drain(self, agent_ids: Sequence[str], deadline: float, reason: str) -> None:
        """Hand every task of ``agent_ids`` to other agents (at checkpoints) before they go."""
        for agent_id in agent_ids:
            self.jobs.set_agent_state(agent_id, "draining", f"scale-in: {reason}")
        while True:
            load = self.load()
            holding = {a: load[a] for a in agent_ids if load.get(a)}
            if not holding:
                return
            if self._clock() >= deadline:
                raise ScalingTimeout(
                    f"agents still hold tasks after the drain deadline: {holding} (is a "
                    "coordinator running? see `sluice status`)"
                )
            self._sleep(self.poll_interval_s)
