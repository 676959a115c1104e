"""The autoscaler on a live fleet: metrics from the control store, scaling through it.

`collect_fleet_metrics` turns the workers' task reports (and the broker's view of the log)
into the `FleetMetrics` every policy reads. `ControlStoreRealizer` is the local backend of
Guardian: it queues the request in the control store and waits until the supervisor
(`sluice up` / `sluice stream`) has stopped the workers at a checkpoint and started the new
job model.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from orchestration.autoscaling.exceptions import RealizerError, ScalingTimeout
from orchestration.autoscaling.metrics import FleetMetrics
from orchestration.lag import TaskLag
from pipelines.control import ControlStore

__all__ = ["ControlStoreRealizer", "collect_fleet_metrics"]

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
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            row = self.control.scaling(self.topic)
            if (
                row is not None
                and row["applied_workers"] == target
                and (row["applied_at"] or 0) >= requested - 1.0
            ):
                return target
            self.sleep(self.poll_s)
        row = self.control.scaling(self.topic) or {}
        raise ScalingTimeout(
            f"the fleet of {self.topic!r} did not reach {target} workers within "
            f"{self.timeout_s:.0f}s (runs {row.get('applied_workers')})"
        )
