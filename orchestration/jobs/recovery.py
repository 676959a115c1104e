"""Recovery jobs an operator runs from the Dagster UI: recover a task or a view, drain an agent.

(No ``from __future__ import annotations``: Dagster reads the Config classes' annotations.)

Each job is one op over the job model (:mod:`orchestration.control_plane.fleet.recovery`); what it
changed shows in the run's metadata, and the agents carry it out on their next tick.
"""

from collections.abc import Callable

import dagster as dg

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.realizers import AwsAutoScalingRealizer
from orchestration.control_plane.fleet.recovery import (
    RecoveryResult,
    drain_agent,
    evacuate_instance,
    recover_task,
    recover_view,
    resume_agent,
)
from orchestration.resources.control import ControlStoreResource
from orchestration.resources.fleet import FleetResource
from pipelines.control import JobModelStore
from pipelines.settings import load_settings

__all__ = [
    "EVACUATE_JOB",
    "RECOVERY_JOBS",
    "DrainConfig",
    "EvacuateConfig",
    "TaskConfig",
    "ViewConfig",
    "evacuate_spot_instance",
]

EVACUATE_JOB = "evacuate_instance"


class TaskConfig(dg.Config):
    task: str
    """TOPIC:PARTITION, e.g. events:3."""
    reason: str = "recovered from the Dagster UI"


class ViewConfig(dg.Config):
    view: str
    task: str | None = None
    """Only on this task; every task where the view is disabled if unset."""
    reason: str = "recovered from the Dagster UI"


class DrainConfig(dg.Config):
    agent_id: str
    wait_s: float = 60.0
    """How long to wait for the agent to hold nothing."""
    reason: str = "drained from the Dagster UI"


class EvacuateConfig(dg.Config):
    """An instance AWS is about to take (filled in by the spot sensor, or by hand)."""

    instance_id: str
    kind: str = "interruption"
    """interruption, rebalance (a replacement first), terminating (lifecycle hook) or
    stopping (already going: its tasks restart elsewhere from their checkpoints at once)."""
    reason: str = "evacuated from the Dagster UI"
    wait_s: float = 100.0
    lifecycle_hook: str | None = None
    lifecycle_group: str | None = None
    lifecycle_token: str | None = None


def _carry_out(
    context: dg.OpExecutionContext,
    control_store: ControlStoreResource,
    operation: Callable[[JobModelStore], RecoveryResult],
) -> None:
    """Run ``operation`` on the job model; what it changed goes into the run's metadata."""
    store = control_store.open()
    try:
        result = operation(store.jobs)
    finally:
        store.close()
    context.log.info("%s %s: %s %s", result.action, result.target, result.changed, result.detail)
    context.add_output_metadata(result.metadata())


@dg.op(description="Re-enable the task's disabled views and restart it from its checkpoint.")
def recover_task_op(
    context: dg.OpExecutionContext, config: TaskConfig, control_store: ControlStoreResource
) -> None:
    _carry_out(context, control_store, lambda jobs: recover_task(jobs, config.task, config.reason))


@dg.op(description="Re-enable a view where it is disabled and restart those tasks with it.")
def recover_view_op(
    context: dg.OpExecutionContext, config: ViewConfig, control_store: ControlStoreResource
) -> None:
    _carry_out(
        context,
        control_store,
        lambda jobs: recover_view(jobs, config.view, config.reason, config.task),
    )


@dg.op(description="Move every task off an agent through checkpoint hand-offs.")
def drain_agent_op(
    context: dg.OpExecutionContext, config: DrainConfig, control_store: ControlStoreResource
) -> None:
    _carry_out(
        context,
        control_store,
        lambda jobs: drain_agent(jobs, config.agent_id, config.reason, config.wait_s),
    )


@dg.op(description="Let a drained agent take tasks again.")
def resume_agent_op(
    context: dg.OpExecutionContext, config: DrainConfig, control_store: ControlStoreResource
) -> None:
    _carry_out(
        context, control_store, lambda jobs: resume_agent(jobs, config.agent_id, config.reason)
    )


@dg.op(
    description="Move every task off an instance AWS is taking (a replacement first when no "
    "other agent can take them, or on a rebalance recommendation), then let it go."
)
def evacuate_instance_op(
    context: dg.OpExecutionContext,
    config: EvacuateConfig,
    control_store: ControlStoreResource,
    fleet: FleetResource,
) -> None:
    def replace() -> None:
        realizer = fleet.realizer("spot")
        realizer.apply(realizer.current() + 1, f"replacement for {config.instance_id}")

    reason = f"{config.kind}: {config.reason}"
    _carry_out(
        context,
        control_store,
        lambda jobs: evacuate_instance(
            jobs,
            config.instance_id,
            reason,
            replace=replace,
            replace_first=config.kind == "rebalance",
            already_going=config.kind == "stopping",
            wait_s=config.wait_s,
        ),
    )
    if config.lifecycle_hook and config.lifecycle_group and config.lifecycle_token:
        aws = AwsAutoScalingRealizer(load_settings(AutoscaleSettings).aws)
        aws.complete_lifecycle(
            config.lifecycle_hook,
            config.lifecycle_group,
            config.lifecycle_token,
            config.instance_id,
        )
        context.log.info("lifecycle action of %s completed: it may go", config.instance_id)


@dg.job(
    name=EVACUATE_JOB,
    description="Evacuate an instance AWS is taking: its tasks move to other agents at "
    "checkpoints; the lifecycle hook is completed after.",
)
def evacuate_spot_instance() -> None:
    evacuate_instance_op()


@dg.job(description="Recover a stream task: re-enable its views, restart it from its checkpoint.")
def recover_stream_task() -> None:
    recover_task_op()


@dg.job(description="Recover a disabled view: re-enable it and restart its tasks with it.")
def recover_stream_view() -> None:
    recover_view_op()


@dg.job(description="Drain a stream agent: hand its tasks to others, give it nothing new.")
def drain_stream_agent() -> None:
    drain_agent_op()


@dg.job(description="Resume a drained stream agent.")
def resume_stream_agent() -> None:
    resume_agent_op()


RECOVERY_JOBS = [
    recover_stream_task,
    recover_stream_view,
    drain_stream_agent,
    resume_stream_agent,
    evacuate_spot_instance,
]
