"""The autoscaler on a live fleet: `collect_fleet_metrics` turns the workers' task reports
(and the broker's view of the log) into the `FleetMetrics` every policy reads. Scaling it
goes through a realizer (:mod:`orchestration.control_plane.autoscaling.realizers`)."""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence

from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.lag import TaskLag

__all__ = ["collect_fleet_metrics"]

NAN = math.nan
MIN_UTILISATION_FOR_RATE = 0.05
"""Below this, busy time is too small to estimate a worker's true rate from."""


def collect_fleet_metrics(
    lags: Sequence[TaskLag],
    *,
    partitions: int,
    previous: FleetMetrics | None = None,
    now: float | None = None,
) -> FleetMetrics:
    """One snapshot of the fleet; metrics that cannot be measured yet are NaN."""
    now = time.time() if now is None else now
    live = [lag for lag in lags if not lag.stale and lag.status.state == "running"]
    workers = len({lag.status.worker_id for lag in live})
    processing = sum(lag.status.rate_in for lag in live)
    backlog = float(sum(lag.backlog for lag in lags))
    growth = NAN
    if previous is not None and now > previous.time and math.isfinite(previous.backlog):
        growth = (backlog - previous.backlog) / (now - previous.time)
    if math.isfinite(growth):
        input_rate = max(0.0, processing + growth)
    else:
        input_rate = processing if backlog == 0 else NAN
    by_worker: dict[str, list[TaskLag]] = defaultdict(list)
    for lag in live:
        by_worker[lag.status.worker_id].append(lag)
    utilisations = [tasks[0].status.utilization for tasks in by_worker.values()]
    true_rates = [
        sum(t.status.rate_in for t in tasks) / tasks[0].status.utilization
        for tasks in by_worker.values()
        if tasks[0].status.utilization >= MIN_UTILISATION_FOR_RATE
    ]
    time_lags = [lag.time_lag_s for lag in lags if lag.time_lag_s is not None]
    return FleetMetrics(
        time=now,
        workers=workers,
        partitions=partitions,
        input_rate=input_rate,
        processing_rate=processing if live else NAN,
        true_processing_rate=statistics.fmean(true_rates) if true_rates else NAN,
        utilisation=statistics.fmean(utilisations) if utilisations else NAN,
        backlog=backlog,
        backlog_growth=growth,
        time_lag=max(time_lags) if time_lags else NAN,
    )
