"""Jobs over assets: the hourly correction of every view, with the archive's completeness."""

import json
from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.constants import RAW_ARCHIVE_KEY, RECONCILIATION_REPORT_KEY, corrected_key
from orchestration.control_plane.autoscaling.explain import describe_plan, plan_markdown
from orchestration.resources.fleet import FleetResource
from orchestration.sensors.autoscaler import SCALE_JOB
from pipelines.views import View

AssetJob = Any
"""What ``dg.define_asset_job`` returns: resolved against the assets when the definitions
load (its class is not public API)."""

__all__ = [
    "CORRECTION_JOB",
    "REPORT_JOB",
    "ScaleConfig",
    "build_correction_job",
    "build_report_job",
    "rescale_fleet",
    "scale_stream_workers",
]

CORRECTION_JOB = "correct_views"
REPORT_JOB = "report_reconciliation"


def build_correction_job(views: Sequence[View]) -> AssetJob:
    """``raw_archive`` and every ``corrected_<view>`` (with their checks) for an hour range."""
    selection = dg.AssetSelection.assets(
        RAW_ARCHIVE_KEY, *(corrected_key(v.name) for v in views if not v.disabled)
    )
    return dg.define_asset_job(
        CORRECTION_JOB,
        selection=selection,
        description="Record the archive's completeness and correct every view for the "
        "run's hours in one Spark job; the correction checks run after each view.",
    )


def build_report_job() -> AssetJob:
    """``reconciliation_report`` for one event-time day (its daily partition)."""
    return dg.define_asset_job(
        REPORT_JOB,
        selection=dg.AssetSelection.assets(RECONCILIATION_REPORT_KEY),
        description="Reconcile every view over one event-time day and store the HTML and "
        "Markdown report under reports/<day>/ of the storage root.",
    )


class ScaleConfig(dg.Config):
    """A scaling decision to carry out (filled in by the autoscaler sensor, or by hand in the UI)."""

    target: int
    current: int | None = None
    reason: str = "requested by hand"
    policy: str = "manual"
    predicted_cost: float | None = None
    metrics_json: str = "{}"
    plan_json: str = "{}"
    """What the planner weighed (`Plan.explain`): the chosen plan, its cost split, the best
    rejected alternative; empty for policies without a plan and for runs made by hand."""


def plan_metadata(explanation: dict[str, Any]) -> dict[str, Any]:
    """The planner's decision as run metadata: the plan tables, the cost split and the
    rejected alternative's first move and cost (nothing for a decision without a plan)."""
    if not explanation:
        return {}
    split = explanation.get("split") or {}
    alternative = explanation.get("alternative") or {}
    metadata: dict[str, Any] = {
        "plan": dg.MetadataValue.md(plan_markdown(explanation)),
        **{f"cost_{part}": float(value) for part, value in split.items()},
        "explanation": dg.MetadataValue.json(explanation),
    }
    if alternative:
        metadata["alternative_first_workers"] = int(alternative["segments"][0]["workers"])
        metadata["alternative_cost"] = float(alternative["cost"])
    return metadata


@dg.op(description="Carry a worker count out through the fleet backend and wait until it runs.")
def rescale_fleet(
    context: dg.OpExecutionContext, config: ScaleConfig, fleet: FleetResource
) -> None:
    realizer = fleet.realizer(config.policy)
    before = realizer.current()
    context.log.info(
        "rescaling %s -> %s workers (%s: %s)", before, config.target, config.policy, config.reason
    )
    plan = json.loads(config.plan_json)
    if plan:
        context.log.info(describe_plan(plan))
    after = realizer.apply(config.target, config.reason)
    context.log_event(
        dg.AssetObservation(
            asset_key="events",
            metadata={
                "workers_before": before,
                "workers_after": after,
                "policy": config.policy,
                "reason": config.reason,
                "predicted_cost": config.predicted_cost
                if config.predicted_cost is not None
                else -1.0,
                "metrics": dg.MetadataValue.json(json.loads(config.metrics_json)),
                **plan_metadata(plan),
            },
        )
    )


@dg.job(
    name=SCALE_JOB, description="Rescale the stream workers (checkpoint hand-off, nothing lost)."
)
def scale_stream_workers() -> None:
    rescale_fleet()
