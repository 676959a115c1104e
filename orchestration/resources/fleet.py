"""The stream fleet as a Dagster resource: what carries out a scaling decision.

Locally the supervisor of `sluice up` / `sluice stream` owns the worker processes, so the
resource queues the request in the control store and waits for it to be applied; in
production it sets an AWS Auto Scaling group's desired capacity.
"""

from __future__ import annotations

from abc import abstractmethod

import dagster as dg
from pydantic import Field

from orchestration.autoscaling.live import ControlStoreRealizer
from orchestration.autoscaling.realizers import AwsAutoScalingRealizer, Realizer
from pipelines.config import get_settings
from pipelines.control import ControlStore

__all__ = ["AwsFleetResource", "FleetResource", "LocalFleetResource"]


class FleetResource(dg.ConfigurableResource):
    """Runs a number of stream workers."""

    @abstractmethod
    def realizer(self, policy: str) -> Realizer:
        """The backend that carries out a worker count."""


class LocalFleetResource(FleetResource):
    """Worker processes on this machine, supervised by `sluice up` / `sluice stream`."""

    topic: str | None = Field(default=None, description="Default: SLUICE_TOPIC.")
    control_store_url: str | None = Field(default=None, description="Default: from settings.")
    timeout_s: float = Field(default=120.0, description="How long to wait for the new fleet.")

    def realizer(self, policy: str) -> Realizer:
        settings = get_settings()
        control = ControlStore(self.control_store_url or settings.resolved_control_store_url)
        return ControlStoreRealizer(
            control, self.topic or settings.topic, timeout_s=self.timeout_s, policy=policy
        )


class AwsFleetResource(FleetResource):
    """An Auto Scaling group of worker instances (settings: SLUICE_AUTOSCALE_AWS__*)."""

    def realizer(self, policy: str) -> Realizer:
        return AwsAutoScalingRealizer()
