"""The lag SLA of ``realtime_<view>``: is the stream within its time-lag target right now?

The stream workers, not Dagster, keep realtime views current, so the ``realtime_lag`` sensor
evaluates this check on every tick from the workers' reports and records the result; it can
also be run by hand from the asset's Checks tab. A task's time lag is zero when it has no
backlog, else the age of the newest record it processed (records carry their produce time,
so that age is how far behind the log's head the task reads). A task that stopped reporting
fails the check whatever its last backlog said.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import dagster as dg

from assets.constants import realtime_key
from orchestration.control_plane.lag import TaskLag, task_lags
from orchestration.resources import ControlStoreResource
from pipelines.control import TaskStatus
from pipelines.views import View

__all__ = ["LAG_CHECK", "build_lag_check", "build_lag_checks", "evaluate_lag"]

LAG_CHECK = "lag_within_sla"
STALE_AFTER_S = 30.0
"""Report age after which a task counts as stopped (workers report every 2 s)."""


def _time_lag_s(lag: TaskLag, now: float) -> float | None:
    if lag.backlog == 0:
        return 0.0
    if lag.status.last_processed_ts is None:
        return None
    return max(0.0, now - lag.status.last_processed_ts / 1000)


def evaluate_lag(
    view: View,
    statuses: Sequence[TaskStatus],
    sla_s: float,
    *,
    now: float | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> dg.AssetCheckEvaluation:
    """The check's result for ``view`` from its tasks' latest reports."""
    now = time.time() if now is None else now
    mine = task_lags(
        [s for s in statuses if s.topic == view.topic], stale_after_s=stale_after_s, now=now
    )
    lags = {lag.status.task: _time_lag_s(lag, now) for lag in mine}
    stale = sorted(lag.status.task for lag in mine if lag.stale)
    known = [lag for lag in lags.values() if lag is not None]
    worst = max(known, default=0.0)
    over = sorted(task for task, lag in lags.items() if lag is not None and lag > sla_s)
    if not mine:
        passed, description = False, "no task of this view has reported: is the fleet running?"
    elif stale:
        passed, description = False, f"{len(stale)} task(s) stopped reporting: {', '.join(stale)}"
    elif over:
        passed, description = (
            False,
            f"time lag {worst:.0f}s > SLA {sla_s:.0f}s on {', '.join(over)}",
        )
    else:
        passed, description = True, f"time lag {worst:.1f}s within the SLA of {sla_s:.0f}s"
    return dg.AssetCheckEvaluation(
        asset_key=realtime_key(view.name),
        check_name=LAG_CHECK,
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        description=description,
        metadata={
            "time_lag_s": round(worst, 3),
            "sla_s": sla_s,
            "backlog": sum(lag.backlog for lag in mine),
            "tasks": len(mine),
            "tasks_stale": len(stale),
            "tasks_over_sla": dg.MetadataValue.json(over),
        },
    )


def build_lag_check(view: View, sla_s: float) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=realtime_key(view.name),
        name=LAG_CHECK,
        description=f"Every task of {view.name} is within {sla_s:.0f}s of the log's head and "
        "reporting (WARN otherwise). The realtime_lag sensor records it on every tick.",
    )
    def _check(control_store: ControlStoreResource) -> dg.AssetCheckResult:
        control = control_store.open()
        try:
            statuses = control.tasks()
        finally:
            control.close()
        result = evaluate_lag(view, statuses, sla_s)
        return dg.AssetCheckResult(
            passed=result.passed,
            severity=result.severity,
            description=result.description,
            metadata=result.metadata,
        )

    return _check


def build_lag_checks(views: Sequence[View], sla_s: float) -> list[dg.AssetChecksDefinition]:
    return [build_lag_check(v, sla_s) for v in views if not v.disabled]
