"""The autoscaler sensor: every 30 s, the configured policy decides the worker count on live metrics.

It reads the workers' task reports from the control store, builds a `FleetMetrics` snapshot, asks
the policy (``SLUICE_AUTOSCALE_POLICY``, default ``mcts``: the planner, which prices hardware, lag
beyond the SLA and every rescale over its horizon) through the decision step the simulator uses
(:mod:`orchestration.control_plane.autoscaling.step`), whose guards may veto (bounds, hysteresis,
and one cooldown, ``SLUICE_AUTOSCALE_SENSOR_COOLDOWN_S``, default 300 s, so the fleet does not
flap), and launches a ``scale_stream_workers`` run when the target changes, with the reason, the
policy, the predicted cost and the rescale pause it priced as tags, and the planner's explanation
(its plan, cost split and rejected alternative) in the run's config. Each tick prices rescales with
the pause fitted from the fleet's recorded rescales
(:mod:`orchestration.control_plane.autoscaling.pause`). The cursor keeps the recent snapshots (the
policy's history) and the time of the last rescale; the control store keeps one snapshot a minute
for days (``SLUICE_AUTOSCALE_HISTORY_RETENTION_S``), and the policy decides on that season followed
by the cursor's snapshots. While a rescale is under way (requested but not applied, or its new
workers not all reporting for two snapshots) a tick only records the snapshot. A scale-up is priced
with the start time the fleet measured: the median of its last scale-ups' request-to-applied times
(the cursor keeps them), else the fleet backend's typical start (a local process's 5 s, an EC2
instance's boot); a ``SLUICE_AUTOSCALE_FLEET__SCALE_UP_START_S`` the user set wins over both.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.live import collect_fleet_metrics
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.pause import with_measured_pause
from orchestration.control_plane.autoscaling.policies import make_policy
from orchestration.control_plane.autoscaling.step import decide
from orchestration.control_plane.autoscaling.vetoes import default_guards
from orchestration.control_plane.lag import task_lags
from orchestration.resources.control import ControlStoreResource
from pipelines.config import get_settings
from pipelines.control import TaskStatus
from pipelines.settings import load_settings

__all__ = ["SCALE_JOB", "decide_scaling", "make_autoscaling_sensor"]

log = logging.getLogger(__name__)

SCALE_JOB = "scale_stream_workers"
HISTORY = 60
REMEMBERING_POLICIES = frozenset({"ds2", "keda"})
"""Policies that hold scale-downs back by their recent targets (ds2's scale-down interval,
keda's stabilisation window); the others decide from the snapshot and history alone."""
STARTS_KEPT = 10
"""Measured scale-up starts the cursor keeps (their median prices the next one)."""
STARTUP_GRACE_S = 120.0
"""How long after a rescale the sensor waits for every new worker to report before deciding on
those that do (a worker that never comes up must not block scaling for good)."""


def _snapshot(data: dict[str, Any]) -> FleetMetrics:
    return FleetMetrics(**{k: (math.nan if v is None else v) for k, v in data.items()})


def _plain(metrics: FleetMetrics) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and math.isnan(v) else v)
        for k, v in metrics.as_dict().items()
    }


def _rescaling(
    fleet: Mapping[str, Any], metrics: FleetMetrics, previous: FleetMetrics | None
) -> str | None:
    """Why the fleet is mid-rescale (its metrics describe no settled fleet), or None.

    Settled means: no request pending, every worker of the new fleet reports, and so did the
    previous snapshot, since backlog growth (hence the input rate) is measured against it and
    the backlog of a stopped fleet stands still in its last reports.
    """
    desired, applied = fleet.get("desired_workers"), fleet.get("applied_workers")
    if applied is None:
        return None
    if desired != applied:
        return f"a rescale to {desired} workers is pending (the fleet runs {applied})"
    applied_at = fleet.get("applied_at") or 0.0
    if metrics.time - applied_at >= STARTUP_GRACE_S:
        return None
    if metrics.workers < applied:
        return f"{metrics.workers} of {applied} workers report since the last rescale"
    if previous is None or previous.time < applied_at or previous.workers < applied:
        return "the rescaled fleet has no previous snapshot to measure growth against yet"
    return None


def measure_start(
    cursor: Mapping[str, Any], fleet: Mapping[str, Any] | None
) -> tuple[list[float], dict[str, Any] | None]:
    """The start times measured so far (with the one the fleet's record now shows, if the
    scale-up the cursor waits for was applied) and the scale-up still waited for.

    A scale-up's start is its request-to-applied time in the control store's scaling record:
    what the realizer waits for before the new workers take tasks (both times written by the
    control store's clock)."""
    starts = [float(x) for x in cursor.get("starts", [])]
    waiting = cursor.get("scale_up")
    if not waiting or fleet is None:
        return starts, waiting
    requested, applied = fleet.get("requested_at"), fleet.get("applied_at")
    if fleet.get("desired_workers") != waiting["target"] or requested is None:
        return starts, None  # a newer request replaced it: that one is not this scale-up's
    if fleet.get("applied_workers") == waiting["target"] and applied and applied >= requested:
        return [*starts, applied - requested][-STARTS_KEPT:], None
    return starts, waiting


def priced_start_s(
    settings: AutoscaleSettings, starts: Sequence[float], default_s: float | None
) -> float:
    """The start a scale-up is priced at: ``scale_up_start_s`` if the user set it, else the
    median of the measured ``starts``, else ``default_s`` (the backend's), else the default."""
    if "scale_up_start_s" in settings.fleet.model_fields_set:
        return settings.fleet.scale_up_start_s
    if starts:
        return float(statistics.median(starts))
    return settings.fleet.scale_up_start_s if default_s is None else default_s


def decide_scaling(
    statuses: Sequence[TaskStatus],
    cursor: dict[str, Any],
    *,
    policy_name: str,
    settings: AutoscaleSettings,
    now: float,
    cooldown_s: float = 300.0,
    fleet: Mapping[str, Any] | None = None,
    season: Sequence[Mapping[str, Any]] = (),
    default_start_s: float | None = None,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(run config + tags of a scaling run or None, the new cursor) for one tick.

    ``fleet`` is the control store's scaling record of the topic (desired and applied
    workers): while a rescale is pending or its new workers are still starting, the snapshot
    is recorded but nothing is decided, since a half-started fleet looks small and idle.
    ``season`` is the per-minute history the control store kept (days of it): the policy
    decides on it followed by the cursor's recent snapshots, as the simulator gives a policy
    everything since the start. A scale-up is priced at the fleet's measured start time
    (:func:`measure_start`), else ``default_start_s`` (the backend's), else the settings'.
    """
    starts, waiting = measure_start(cursor, fleet)
    start_s = priced_start_s(settings, starts, default_start_s)
    settings = settings.updated(fleet={"scale_up_start_s": start_s})
    history = [_snapshot(d) for d in cursor.get("history", [])]
    partitions = len({(s.topic, s.partition) for s in statuses})
    metrics = collect_fleet_metrics(
        task_lags(statuses, now=now),
        partitions=partitions,
        previous=history[-1] if history else None,
        now=now,
    )
    new_cursor = {
        "history": [*cursor.get("history", []), _plain(metrics)][-HISTORY:],
        "last_rescale_at": cursor.get("last_rescale_at"),
        "starts": starts,
        "scale_up": waiting,
    }
    if metrics.workers == 0:
        return None, new_cursor  # not ready: no worker reports yet
    if fleet is not None and (why := _rescaling(fleet, metrics, history[-1] if history else None)):
        log.info("autoscaler: not deciding, %s", why)
        return None, new_cursor
    policy = make_policy(policy_name, settings)
    if policy_name in REMEMBERING_POLICIES:
        # A tick builds the policy afresh; replaying the recorded snapshots restores its
        # memory of recent targets before it decides (as far back as the cursor's history).
        for i, past in enumerate(history):
            policy.decide(past, history[:i])
    guards = default_guards(settings, cooldown_s=cooldown_s)
    first_recent = history[0].time if history else metrics.time
    older = [m for m in map(_snapshot, season) if m.time < first_recent]
    final = decide(
        policy, metrics, [*older, *history], guards, cursor.get("last_rescale_at")
    ).decision
    if final.target == metrics.workers:
        return None, new_cursor
    new_cursor["last_rescale_at"] = now
    new_cursor["scale_up"] = {"target": final.target} if final.target > metrics.workers else None
    request = {
        "target": final.target,
        "current": metrics.workers,
        "reason": final.reason,
        "policy": policy_name,
        "predicted_cost": final.predicted_cost,
        "metrics_json": json.dumps(_plain(metrics)),
        "plan_json": json.dumps(final.explanation or {}),
    }
    return request, new_cursor


def with_live_bucket_factor(settings: AutoscaleSettings, factor: int) -> AutoscaleSettings:
    """``settings`` with the fleet's key-bucket factor set to the live fleet's."""
    fleet = settings.fleet.model_copy(update={"max_bucket_factor": factor})
    return settings.model_copy(update={"fleet": fleet})


def make_autoscaling_sensor(
    job: dg.JobDefinition,
    views: Sequence[Any] = (),
    settings: AutoscaleSettings | None = None,
    clock: Callable[[], float] = time.time,
    default_start_s: float | None = None,
) -> dg.SensorDefinition:
    """The ``autoscaler`` sensor; ``settings`` are read once here (default: the
    environment and the settings file) and ``clock`` gives each tick's time;
    ``default_start_s`` is the fleet backend's start until the fleet measured its own. The key-bucket
    factor is the live fleet's (``SLUICE_MAX_BUCKET_FACTOR``): the policy sizes counts above
    the partitions only when the coordinator will split for them."""
    settings = with_live_bucket_factor(
        settings or load_settings(AutoscaleSettings), get_settings().max_bucket_factor
    )
    interval = settings.sensor_interval_s
    running = settings.sensor

    @dg.sensor(
        name="autoscaler",
        job=job,
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING
        if running
        else dg.DefaultSensorStatus.STOPPED,
        description="Evaluates the scaling policy on live lag and utilisation; launches "
        f"{SCALE_JOB} when the target worker count changes.",
    )
    def autoscaler(context: dg.SensorEvaluationContext, control_store: ControlStoreResource):
        cursor = json.loads(context.cursor) if context.cursor else {}
        now = clock()
        control = control_store.open()
        try:
            statuses = control.tasks()
            topics = sorted({s.topic for s in statuses})
            topic = topics[0] if len(topics) == 1 else None
            fleet = control.scaling(topic) if topic else None
            retain = settings.history_retention_s
            season = control.rate_history(topic, now - retain, now) if topic else []
            fit_from = settings.fleet.pause_fit_rescales
            rescales = control.rescales.recent(topic, fit_from) if topic else []
            tick_settings, pause = with_measured_pause(
                settings, rescales, [s.state_bytes for s in statuses if s.topic == topic]
            )
            request, new_cursor = decide_scaling(
                statuses,
                cursor,
                policy_name=settings.policy,
                settings=tick_settings,
                now=now,
                cooldown_s=settings.sensor_cooldown_s,
                fleet=fleet,
                season=season,
                default_start_s=default_start_s,
            )
            if topic:  # this tick's snapshot becomes its minute's in the season
                control.record_rate(topic, now, new_cursor["history"][-1], retain_s=retain)
        finally:
            control.close()
        context.update_cursor(json.dumps(new_cursor))
        if request is None:
            return dg.SkipReason("no change")
        tags = {
            "sluice/policy": request["policy"],
            "sluice/reason": request["reason"][:200],
            "sluice/from_workers": str(request["current"]),
            "sluice/to_workers": str(request["target"]),
        }
        if request["predicted_cost"] is not None:
            tags["sluice/predicted_cost"] = f"{request['predicted_cost']:.4f}"
        tags["sluice/rescale_pause"] = pause.describe()[:200]
        start_s = priced_start_s(tick_settings, new_cursor["starts"], default_start_s)
        tags["sluice/start_s"] = f"{start_s:.1f}"
        return dg.RunRequest(
            run_key=f"scale-{new_cursor['last_rescale_at']:.0f}",
            run_config={"ops": {"rescale_fleet": {"config": request}}},
            tags=tags,
        )

    return autoscaler
