"""Realizers carry out a decided worker count on a backend (Metamarkets' Guardian).

`Realizer` is the protocol: `current()` reads the count, `apply(target, reason)` sets it and
returns once the backend has it (or raises). `SimulatedRealizer` is the simulator's (and tests')
backend; `AwsAutoScalingRealizer` sets an Auto Scaling group's desired capacity via boto3 and
waits for the instances to be InService, within a deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from orchestration.autoscaling.config import AwsSettings
from orchestration.autoscaling.exceptions import RealizerError, ScalingTimeout

__all__ = ["AwsAutoScalingRealizer", "Realizer", "RescaleEvent", "SimulatedRealizer"]

logger = logging.getLogger(__name__)


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
    """Sets an Auto Scaling group's desired capacity and waits for InService instances."""

    def __init__(
        self,
        settings: AwsSettings | None = None,
        *,
        client: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or AwsSettings()
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

    def in_service(self) -> int:
        """Instances of the group that are InService and Healthy."""
        return sum(
            1
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
        try:
            self.client.set_desired_capacity(
                AutoScalingGroupName=self.group_name, DesiredCapacity=target, HonorCooldown=False
            )
        except (BotoCoreError, ClientError) as exc:
            raise RealizerError(
                f"setting group {self.group_name!r} desired capacity to {target} failed: {exc}"
            ) from exc
        deadline = self._clock() + self.settings.wait_timeout_s
        while True:
            ready = self.in_service()
            if ready == target:
                return target
            if self._clock() >= deadline:
                raise ScalingTimeout(
                    f"group {self.group_name!r}: {ready} of {target} instances InService after "
                    f"{self.settings.wait_timeout_s:.0f} s"
                )
            self._sleep(self.settings.poll_interval_s)
