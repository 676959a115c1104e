"""Realizers carry out a decided worker count on a backend (Metamarkets' Guardian).

`Realizer` is the protocol: `current()` reads the count, `apply(target, reason)` sets it and returns
once the backend has it (or raises). `SimulatedRealizer` is the simulator's (and tests') backend.
`ControlStoreRealizer` is the local one: it queues the request in the control store and waits until
the supervisor (`sluice up` / `sluice stream`) runs the new count. `AwsAutoScalingRealizer` sets an
Auto Scaling group's size and `EcsServiceRealizer` an ECS service's desired count, via boto3, within
a deadline; given the job model, both do what Guardian did
(:mod:`orchestration.control_plane.autoscaling.guardian`): a scale-out is done when the new
machines' agents have registered, a scale-in drains the agents that go before their machines are let
go.

Each realizer also measures how long a scale-out's new workers take to start taking work
(`start_s`): about 5 s for a local agent process, minutes for an EC2 instance of an Auto
Scaling group. Until it has measured one, it reports its backend's default. The planner prices
that wait: the capacity a scale-up adds is missing until then (`with_measured_start`).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from orchestration.control_plane.autoscaling.config import (
    AutoscaleSettings,
    AwsSettings,
    EcsSettings,
)
from orchestration.control_plane.autoscaling.exceptions import RealizerError, ScalingTimeout
from orchestration.control_plane.autoscaling.guardian import AgentGuardian
from pipelines.control import ControlStore, JobModelStore

__all__ = [
    "LOCAL_PROCESS_START_S",
    "AwsAutoScalingRealizer",
    "ControlStoreRealizer",
    "EcsServiceRealizer",
    "Realizer",
    "RescaleEvent",
    "SimulatedRealizer",
    "StartClock",
    "with_measured_start",
]

logger = logging.getLogger(__name__)


def _guardian(
    jobs: JobModelStore | None,
    poll_interval_s: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> AgentGuardian | None:
    """Guardian's waits and drains when the job model is given; None leaves them out."""
    if jobs is None:
        return None
    return AgentGuardian(jobs, poll_interval_s=poll_interval_s, sleep=sleep, clock=clock)


@runtime_checkable
class Realizer(Protocol):
    def current(self) -> int:
        """The worker count the backend runs now."""
        ...

    def apply(self, target: int, reason: str) -> int:
        """Make the backend run `target` workers; returns the count it runs afterwards."""
        ...


@dataclass(frozen=True)
class RescaleEvent:
    time: float
    before: int
    after: int
    reason: str


LOCAL_PROCESS_START_S = 5.0
"""A local agent process, from the request to its first hand-off (what the closed-loop test
measures: docs/autoscaling.md)."""


@dataclass
class StartClock:
    """How long a scale-out's new workers take to start: the median of the last ``keep``
    measured, else ``default_s`` (the backend's typical start)."""

    default_s: float
    keep: int = 10
    measured: list[float] = field(default_factory=list)

    def record(self, seconds: float, added: int, backend: str) -> None:
        self.measured = [*self.measured, max(seconds, 0.0)][-self.keep :]
        logger.info(
            "%s: %d new worker(s) started in %.1f s (start time now %.1f s)",
            backend,
            added,
            seconds,
            self.start_s(),
        )

    def start_s(self) -> float:
        return statistics.median(self.measured) if self.measured else self.default_s


def with_measured_start(settings: AutoscaleSettings, realizer: object) -> AutoscaleSettings:
    """``settings`` with the scale-up start the realizer measured (or its backend's default);
    unchanged for a realizer that does not measure one (the simulator's)."""
    clock = getattr(realizer, "start_clock", None)
    if not isinstance(clock, StartClock):
        return settings
    return settings.updated(fleet={"scale_up_start_s": clock.start_s()})


@dataclass
class SimulatedRealizer:
    """In-memory worker count with an event log; `clock` gives the (simulated) time."""

    workers: int
    clock: Callable[[], float] = time.monotonic
    events: list[RescaleEvent] = field(default_factory=list)

    def current(self) -> int:
        return self.workers

    def apply(self, target: int, reason: str) -> int:
        if target < 0:
            raise RealizerError(f"cannot run {target} workers")
        if target != self.workers:
            self.events.append(RescaleEvent(self.clock(), self.workers, target, reason))
            self.workers = target
        return self.workers


class AwsAutoScalingRealizer:
    """Sets an Auto Scaling group's desired capacity and waits for InService instances; with
    ``jobs``, also for their agents (agent id = instance id) and drains before scale-in."""

    def __init__(
        self,
        settings: AwsSettings | None = None,
        *,
        client: Any | None = None,
        jobs: JobModelStore | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or AwsSettings()
        self.guardian = _guardian(jobs, self.settings.poll_interval_s, sleep, clock)
        if client is None:
            import boto3

            client = boto3.client(
                "autoscaling",
                region_name=self.settings.region,
                endpoint_url=self.settings.endpoint_url,
            )
        self.client = client
        self._sleep = sleep
        self._clock = clock
        self.start_clock = StartClock(self.settings.instance_start_s)

    @property
    def group_name(self) -> str:
        return self.settings.group_name

    def _group(self) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            groups = self.client.describe_auto_scaling_groups(
                AutoScalingGroupNames=[self.group_name]
            )["AutoScalingGroups"]
        except (BotoCoreError, ClientError) as exc:
            raise RealizerError(
                f"cannot describe Auto Scaling group {self.group_name!r}: {exc}"
            ) from exc
        if not groups:
            raise RealizerError(f"Auto Scaling group {self.group_name!r} not found")
        return groups[0]

    def current(self) -> int:
        """The group's desired capacity."""
        return int(self._group()["DesiredCapacity"])

    def complete_lifecycle(self, hook: str, group: str, token: str, instance_id: str) -> None:
        """Let a terminating instance go (its lifecycle hook waits for this)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.complete_lifecycle_action(
                LifecycleHookName=hook,
                AutoScalingGroupName=group,
                LifecycleActionToken=token,
                LifecycleActionResult="CONTINUE",
                InstanceId=instance_id,
            )
        except (BotoCoreError, ClientError) as exc:
            raise RealizerError(
                f"completing lifecycle action {hook!r} of {instance_id} failed: {exc}"
            ) from exc

    def in_service(self) -> int:
        """Instances of the group that are InService and Healthy."""
        return len(self.in_service_ids())

    def in_service_ids(self) -> list[str]:
        return sorted(
            inst["InstanceId"]
            for inst in self._group().get("Instances", [])
            if inst.get("LifecycleState") == "InService"
            and inst.get("HealthStatus", "Healthy") == "Healthy"
        )

    def apply(self, target: int, reason: str) -> int:
        """Set the desired capacity, then wait until exactly `target` instances are InService."""
        from botocore.exceptions import BotoCoreError, ClientError

        group = self._group()
        lo, hi = int(group["MinSize"]), int(group["MaxSize"])
        if not lo <= target <= hi:
            raise RealizerError(
                f"target {target} outside group {self.group_name!r} bounds [{lo}, {hi}]"
            )
        logger.info(
            "group %s: desired %s -> %s (%s)",
            self.group_name,
            group["DesiredCapacity"],
            target,
            reason,
        )
        asked = self._clock()
        deadline = asked + self.settings.wait_timeout_s
        running = self.in_service_ids()
        try:
            if self.guardian is not None and target < len(running):
                victims = self.guardian.pick_victims(running, len(running) - target)
                self.guardian.drain(victims, deadline, reason)
                for instance in victims:
                    logger.info("group %s: terminating drained %s", self.group_name, instance)
                    self.client.terminate_instance_in_auto_scaling_group(
                        InstanceId=instance, ShouldDecrementDesiredCapacity=True
                    )
            else:
                self.client.set_desired_capacity(
                    AutoScalingGroupName=self.group_name,
                    DesiredCapacity=target,
                    HonorCooldown=False,
                )
        except (BotoCoreError, ClientError) as exc:
            raise RealizerError(
                f"setting group {self.group_name!r} desired capacity to {target} failed: {exc}"
            ) from exc
        while True:
            ready = self.in_service_ids()
            if len(ready) == target:
                if self.guardian is not None:
                    self.guardian.await_registered(ready, deadline)
                if target > len(running):  # a scale-out: how long its instances took
                    self.start_clock.record(
                        self._clock() - asked, target - len(running), f"group {self.group_name}"
                    )
                return target
            if self._clock() >= deadline:
                raise ScalingTimeout(
                    f"group {self.group_name!r}: {len(ready)} of {target} instances InService after "
                    f"{self.settings.wait_timeout_s:.0f} s"
                )
            self._sleep(self.settings.poll_interval_s)


class EcsServiceRealizer:
    """Sets an ECS service's desired count; with ``jobs``, waits for that many agents to
    register (agent id = ECS task id) and drains the agents of a scale-in, then stops exactly
    their tasks, so ECS does not pick busy ones."""

    def __init__(
        self,
        settings: EcsSettings | None = None,
        *,
        client: Any | None = None,
        jobs: JobModelStore | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or EcsSettings()
        if client is None:
            import boto3

            client = boto3.client(
                "ecs", region_name=self.settings.region, endpoint_url=self.settings.endpoint_url
            )
        self.client = client
        self.guardian = _guardian(jobs, self.settings.poll_interval_s, sleep, clock)
        self._clock = clock
        self.start_clock = StartClock(self.settings.task_start_s)

    @property
    def name(self) -> str:
        return f"{self.settings.cluster}/{self.settings.service}"

    def _service(self) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            services = self.client.describe_services(
                cluster=self.settings.cluster, services=[self.settings.service]
            )["services"]
        except (BotoCoreError, ClientError) as exc:
            raise RealizerError(f"cannot describe ECS service {self.name!r}: {exc}") from exc
        if not services or services[0].get("status") == "INACTIVE":
            raise RealizerError(f"ECS service {self.name!r} not found")
        return services[0]

    def current(self) -> int:
        return int(self._service()["desiredCount"])

    def apply(self, target: int, reason: str) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        if not 0 <= target <= self.settings.max_count:
            raise RealizerError(
                f"target {target} outside ECS service {self.name!r} bounds "
                f"[0, {self.settings.max_count}]"
            )
        before = self.current()
        asked = self._clock()
        deadline = asked + self.settings.wait_timeout_s
        victims: list[str] = []
        keep: list[str] = []
        if self.guardian is not None and target < before:
            live = self.guardian.live_agents()
            victims = self.guardian.pick_victims(live, len(live) - target)
            self.guardian.drain(victims, deadline, reason)
            keep = [a for a in live if a not in victims]
            self._protect(keep, True)  # ECS then picks the drained tasks to stop
        logger.info("service %s: desired %s -> %s (%s)", self.name, before, target, reason)
        try:
            self.client.update_service(
                cluster=self.settings.cluster, service=self.settings.service, desiredCount=target
            )
        except (BotoCoreError, ClientError) as exc:
            raise RealizerError(
                f"setting ECS service {self.name!r} desired count to {target} failed: {exc}"
            ) from exc
        for task in victims:
            try:
                self.client.stop_task(cluster=self.settings.cluster, task=task, reason=reason)
            except (BotoCoreError, ClientError) as exc:  # gone already: nothing to stop
                logger.warning("service %s: stopping drained task %s: %s", self.name, task, exc)
        if keep:
            self._protect(keep, False)
        if self.guardian is not None and target > before:
            self.guardian.await_count(target, deadline)
            self.start_clock.record(self._clock() - asked, target - before, f"service {self.name}")
        return target

    def _protect(self, tasks: list[str], enabled: bool) -> None:
        """ECS task scale-in protection for ``tasks`` (best effort: a backend without it, like
        moto, leaves ECS to pick, and the drained tasks are stopped by id right after)."""
        from botocore.exceptions import BotoCoreError, ClientError

        if not tasks:
            return
        try:
            kwargs = {"expiresInMinutes": 10} if enabled else {}
            self.client.update_task_protection(
                cluster=self.settings.cluster, tasks=tasks, protectionEnabled=enabled, **kwargs
            )
        except (BotoCoreError, ClientError) as exc:
            logger.warning("service %s: task scale-in protection unavailable: %s", self.name, exc)


class ControlStoreRealizer:
    """Queue a worker count in the control store and wait until the local fleet runs it."""

    def __init__(
        self,
        control: ControlStore,
        topic: str,
        *,
        timeout_s: float = 120.0,
        poll_s: float = 0.5,
        policy: str = "",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.control = control
        self.topic = topic
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.policy = policy
        self.sleep = sleep
        self.start_clock = StartClock(LOCAL_PROCESS_START_S)

    def current(self) -> int:
        row = self.control.scaling(self.topic)
        if row is None or row["applied_workers"] is None:
            raise RealizerError(
                f"no fleet for topic {self.topic!r} has reported; is `sluice up` or "
                "`sluice stream` running?"
            )
        return int(row["applied_workers"])

    def apply(self, target: int, reason: str) -> int:
        if target < 1:
            raise RealizerError(f"a fleet needs at least one worker, asked for {target}")
        before = self.current()
        self.control.request_workers(self.topic, target, reason, self.policy)
        if before == target:
            return target
        requested = time.time()
        asked = time.monotonic()
        deadline = asked + self.timeout_s
        while time.monotonic() < deadline:
            row = self.control.scaling(self.topic)
            if (
                row is not None
                and row["applied_workers"] == target
                and (row["applied_at"] or 0) >= requested - 1.0
            ):
                if target > before:  # until the supervisor has the new count running
                    self.start_clock.record(
                        time.monotonic() - asked, target - before, f"fleet of {self.topic!r}"
                    )
                return target
            self.sleep(self.poll_s)
        row = self.control.scaling(self.topic) or {}
        raise ScalingTimeout(
            f"the fleet of {self.topic!r} did not reach {target} workers within "
            f"{self.timeout_s:.0f}s (runs {row.get('applied_workers')})"
        )
