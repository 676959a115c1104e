"""`threshold`: the Palo Alto Networks rules on backlog drain time and CPU.

Scale up when the backlog would take more than 120 s to drain or CPU is above 90%, sized so the
fleet keeps up with the growth and drains what is there in a target time; scale down only when
CPU is below 70%, the backlog is not growing and drains in under 10 s, sized from CPU alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestration.control_plane.autoscaling.config import AutoscaleSettings, ThresholdSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.policies.base import bounded, missing_decision

__all__ = ["ThresholdPolicy"]

_NEEDED = (Metric.PROCESSING_RATE, Metric.UTILISATION, Metric.BACKLOG, Metric.BACKLOG_GROWTH)


class ThresholdPolicy:
    """PANW's threshold rules with their sizing formulas."""

    name = "threshold"

    def __init__(self, settings: ThresholdSettings, min_workers: int, max_workers: int) -> None:
        self.s = settings
        self.lo = min_workers
        self.hi = max_workers

    @classmethod
    def from_settings(cls, settings: AutoscaleSettings) -> ThresholdPolicy:
        return cls(settings.threshold, settings.fleet.min_workers, settings.fleet.upper)

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if (skip := missing_decision(self.name, metrics, *_NEEDED)) is not None:
            return skip
        s, w = self.s, metrics.workers
        throughput = metrics.processing_rate
        backlog, growth, cpu = metrics.backlog, metrics.backlog_growth, metrics.utilisation
        idle = 0.0 if backlog <= 0 else math.inf  # nothing processed: drains never, or is empty
        backlog_time = backlog / throughput if throughput > 0 else idle
        if backlog_time > s.backlog_time_up_s or cpu > s.cpu_up:
            if not math.isfinite(backlog_time):
                # nothing processed while a backlog waits (e.g. a restart): ask for one more
                target = w + 1
            else:
                w_req = w * (max(growth, 0.0) + throughput) / throughput
                w_extra = w * backlog_time / s.catch_up_target_s
                w_cpu = w * cpu / s.target_cpu
                target = math.ceil(max(w_req + w_extra, w_cpu) - 1e-9)
            target = bounded(max(target, w + 1), self.lo, self.hi)
            reason = (
                f"scale up: drain time {backlog_time:.0f} s, cpu {cpu:.0%}, "
                f"growth {growth:.0f} msg/s"
            )
            if target == w:
                return ScalingDecision.no_change(w, reason + " (at max)", self.name)
            return ScalingDecision(target, reason, self.name, current=w)
        if cpu < s.cpu_down and growth <= 0 and backlog_time < s.backlog_time_down_s:
            target = bounded(math.ceil(w * cpu / s.target_cpu - 1e-9), self.lo, self.hi)
            if target < w:
                reason = f"scale down: cpu {cpu:.0%}, drain time {backlog_time:.0f} s"
                return ScalingDecision(target, reason, self.name, current=w)
        return ScalingDecision.no_change(w, f"within thresholds (cpu {cpu:.0%})", self.name)
