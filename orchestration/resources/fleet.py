"""The stream fleet as a Dagster resource: what carries out a scaling decision.

Locally the supervisor of `sluice up` / `sluice stream` owns the agent processes, so the
resource queues the request in the control store and waits for it to be applied; in
production it sizes an AWS Auto Scaling group or an ECS service of agents.
"""

from __future__ import annotations

from abc import abstractmethod

import dagster as dg
from pydantic import Field

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.realizers import (
    LOCAL_PROCESS_START_S,
    AwsAutoScalingRealizer,
    ControlStoreRealizer,
    EcsServiceRealizer,
    Realizer,
)
from pipelines.config import get_settings
from pipelines.control import ControlStore
from pipelines.settings import load_settings, overridden

__all__ = ["AwsFleetResource", "EcsFleetResource", "FleetResource", "LocalFleetResource"]


class FleetResource(dg.ConfigurableResource):
    """Runs a number of stream workers."""

    @abstractmethod
    def realizer(self, policy: str) -> Realizer:
        """The backend that carries out a worker count."""

    def start_s(self) -> float:
        """How long a scale-up's new workers typically take to start on this backend, s: what
        the autoscaler prices until the fleet has measured its own."""
        return LOCAL_PROCESS_START_S


class LocalFleetResource(FleetResource):
    """Worker processes on this machine, supervised by `sluice up` / `sluice stream`."""

    topic: str | None = Field(default=None, description="Default: SLUICE_TOPIC.")
    control_store_url: str | None = Field(default=None, description="Default: from settings.")
    timeout_s: float = Field(default=120.0, description="How long to wait for the new fleet.")

    def realizer(self, policy: str) -> Realizer:
        settings = get_settings()
        control = ControlStore(
            self.control_store_url or settings.resolved_control_store_url,
            settings.control_store_timeout_s,
        )
        return ControlStoreRealizer(
            control, self.topic or settings.topic, timeout_s=self.timeout_s, policy=policy
        )


def _jobs():
    settings = get_settings()
    return ControlStore(settings.resolved_control_store_url, settings.control_store_timeout_s).jobs


class AwsFleetResource(FleetResource):
    """An Auto Scaling group of agent instances (settings: SLUICE_AUTOSCALE_AWS__*); waits for
    new instances' agents to register and drains agents before their instances go. Unset
    fields come from the settings; the code location fills them so the resources page
    shows the group it scales."""

    group_name: str | None = Field(default=None, description="Auto Scaling group of agents.")
    region: str | None = Field(default=None, description="AWS region of the group.")

    @classmethod
    def from_settings(cls) -> AwsFleetResource:
        aws = load_settings(AutoscaleSettings).aws
        return cls(group_name=aws.group_name, region=aws.region)

    def realizer(self, policy: str) -> Realizer:
        aws = overridden(
            load_settings(AutoscaleSettings).aws, group_name=self.group_name, region=self.region
        )
        return AwsAutoScalingRealizer(aws, jobs=_jobs())

    def start_s(self) -> float:
        return load_settings(AutoscaleSettings).aws.instance_start_s


class EcsFleetResource(FleetResource):
    """An ECS service of agent tasks (settings: SLUICE_AUTOSCALE_ECS__*); waits for new tasks'
    agents to register and drains agents before their tasks are stopped. Unset fields come
    from the settings."""

    cluster: str | None = Field(default=None, description="ECS cluster of the agents.")
    service: str | None = Field(default=None, description="ECS service running the agents.")
    region: str | None = Field(default=None, description="AWS region of the cluster.")

    @classmethod
    def from_settings(cls) -> EcsFleetResource:
        ecs = load_settings(AutoscaleSettings).ecs
        return cls(cluster=ecs.cluster, service=ecs.service, region=ecs.region)

    def realizer(self, policy: str) -> Realizer:
        ecs = overridden(
            load_settings(AutoscaleSettings).ecs,
            cluster=self.cluster,
            service=self.service,
            region=self.region,
        )
        return EcsServiceRealizer(ecs, jobs=_jobs())

    def start_s(self) -> float:
        return load_settings(AutoscaleSettings).ecs.task_start_s
