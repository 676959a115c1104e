"""One supervisor for a local fleet: restarts, deployments, scaling requests, samples.

`sluice stream` and `sluice up` both run :meth:`Supervisor.run`; each tick restarts dead agents
(giving up on one that crashed three times in ten minutes,
:mod:`orchestration.control_plane.fleet.local`), reloads the fleet when a view is deployed, changed
or disabled, carries out scaling requests from the control store (Guardian's queue: new agents are
awaited until they registered) and records a fleet sample for the report. The caller shows what
happened; nothing here prints.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from orchestration.control_plane.fleet.local import LocalFleet
from orchestration.control_plane.fleet.samples import FleetSampler
from orchestration.control_plane.fleet.scheduling import describe_assignments
from orchestration.control_plane.lag import ProducedProbe, TaskLag, collect_task_lags
from orchestration.control_plane.runtime import Runtime

__all__ = ["DeploymentWatcher", "ScaleWatcher", "Supervisor"]


class DeploymentWatcher:
    """Says when the views in force change (a deployment, a Disabled state, an edit of the views
    file the agents run) and marks deployments Running; each agent reloads the views itself
    (:meth:`orchestration.control_plane.fleet.agent.Agent.reload_views`), here and on other
    hosts."""

    def __init__(self, runtime: Runtime, fleet: LocalFleet, every_s: float = 5.0) -> None:
        self.runtime = runtime
        self.fleet = fleet
        self.views_file = getattr(fleet, "views_file", None)  # what the workers were given
        self.every_s = every_s
        self.version = runtime.deployment_version(self.views_file)
        self.next_check = time.monotonic() + every_s
        runtime.mark_deployed_running()

    def check(self) -> list[str]:
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + self.every_s
        version = self.runtime.deployment_version(self.views_file)
        if version == self.version:
            return []
        self.version = version
        self.runtime.mark_deployed_running()
        return [
            "view deployments changed: every agent reloads them and restarts its tasks from "
            "their checkpoints"
        ]


class ScaleWatcher:
    """Carries out scaling requests from the control store (Guardian's queue) on a local fleet."""

    def __init__(
        self, runtime: Runtime, fleet: LocalFleet, topic: str, every_s: float = 2.0
    ) -> None:
        self.runtime = runtime
        self.fleet = fleet
        self.topic = topic
        self.every_s = every_s
        self.next_check = 0.0
        runtime.control.record_applied(topic, len(fleet.agents))

    def check(self) -> list[str]:
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + self.every_s
        request = self.runtime.control.scaling(self.topic)
        if request is None or request["desired_workers"] == len(self.fleet.agents):
            return []
        before = len(self.fleet.agents)
        agents = self.fleet.rescale(request["desired_workers"])
        self.runtime.control.record_applied(self.topic, len(agents))
        job_model = describe_assignments(self.runtime.control.jobs.assignments(self.topic))
        return [
            f"rescaled {before} -> {len(agents)} agents ({request['policy']}: "
            f"{request['reason']}); the coordinator hands tasks over: {job_model}"
        ]


class Supervisor:
    """Keeps a local fleet running, current and sized; one :meth:`tick` per interval."""

    def __init__(self, runtime: Runtime, fleet: LocalFleet, topic: str | None = None) -> None:
        self.runtime = runtime
        self.fleet = fleet
        self.deployments = DeploymentWatcher(runtime, fleet)
        self.scaling = ScaleWatcher(runtime, fleet, topic or runtime.settings.topic)
        self.probe = ProducedProbe(runtime.bootstrap, runtime.kafka)
        self.sampler = FleetSampler(runtime, probe=self.probe)

    def tick(self, with_lags: bool = False) -> tuple[list[str], list[TaskLag] | None]:
        """(what happened, every task's lag now if ``with_lags``); lags cost a broker round
        trip, so without ``with_lags`` they are collected only when a sample is due."""
        events = [*self.fleet.supervise(), *self.deployments.check(), *self.scaling.check()]
        lags = collect_task_lags(self.runtime, probe=self.probe) if with_lags else None
        self.sampler.maybe_record(lags)
        return events, lags

    def run(
        self,
        stop: threading.Event,
        every_s: float,
        on_tick: Callable[[list[str], list[TaskLag] | None], bool | None],
        *,
        with_lags: bool = False,
    ) -> None:
        """Tick every ``every_s`` until ``stop`` is set or ``on_tick`` returns True."""
        try:
            while not stop.wait(every_s):
                events, lags = self.tick(with_lags)
                if on_tick(events, lags):
                    return
        finally:
            self.probe.close()
