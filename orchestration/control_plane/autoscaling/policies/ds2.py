"""`ds2`: Flink's Kubernetes-operator autoscaler, sized from the true processing rate.

The true processing rate (records per second of busy time) says what one worker can do
whatever its current load, so one step lands the fleet at the target utilisation. Spare capacity
is added to catch up the current lag and the backlog a restart will cause; parallelism is capped
by (and, as Flink does for Kafka sources, aligned to a divisor of) the partition count; a
scale-down only goes to the largest recommendation of the last scale-down interval, which is
what Flink's users asked for after too many rescales.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from orchestration.control_plane.autoscaling.config import AutoscaleSettings, Ds2Settings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.policies.base import (
    bounded,
    last_finite,
    missing_decision,
)

__all__ = ["Ds2Policy"]


def _align(target: int, partitions: int, hi: int) -> int:
    """Smallest divisor of `partitions` >= target (Flink's key-group/partition alignment)."""
    for p in range(target, min(partitions, hi) + 1):
        if partitions % p == 0:
            return p
    return target


class Ds2Policy:
    """DS2 sizing with a utilisation band and a scale-down stabilisation interval."""

    name = "ds2"

    def __init__(self, settings: Ds2Settings, min_workers: int, max_workers: int) -> None:
        self.s = settings
        self.lo = min_workers
        self.hi = max_workers
        self._recent: deque[tuple[float, int]] = deque()

    @classmethod
    def from_settings(cls, settings: AutoscaleSettings) -> Ds2Policy:
        return cls(settings.ds2, settings.fleet.min_workers, settings.fleet.upper)

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if (
            skip := missing_decision(self.name, metrics, Metric.INPUT_RATE, Metric.BACKLOG)
        ) is not None:
            return skip
        s, w = self.s, metrics.workers
        true_rate = last_finite(Metric.TRUE_PROCESSING_RATE, metrics, history)
        if not math.isfinite(true_rate) or true_rate <= 0:
            return missing_decision(self.name, metrics, Metric.TRUE_PROCESSING_RATE) or (
                ScalingDecision.no_change(w, "true processing rate unknown", self.name)
            )
        rate = metrics.input_rate
        catch_up = metrics.backlog / s.catch_up_s + rate * s.restart_time_s / s.catch_up_s
        required = rate + catch_up
        raw = math.ceil(required / (true_rate * s.target_utilisation) - 1e-9)
        target = bounded(raw, self.lo, self.hi)
        if s.align_to_partitions:
            target = _align(target, metrics.partitions, self.hi)
        target = min(target, metrics.partitions, self.hi)
        now = metrics.time
        self._recent.append((now, target))
        while self._recent and self._recent[0][0] < now - s.scale_down_interval_s:
            self._recent.popleft()
        util = required / (w * true_rate) if w else math.inf
        if s.utilisation_min <= util <= s.utilisation_max and metrics.backlog_growth <= 0:
            return ScalingDecision.no_change(w, f"utilisation {util:.0%} inside band", self.name)
        if target < w:
            target = max(t for _, t in self._recent)
            if target >= w:
                return ScalingDecision.no_change(
                    w, f"scale-down held by the {s.scale_down_interval_s:.0f} s interval", self.name
                )
        if target == w:
            return ScalingDecision.no_change(w, f"utilisation {util:.0%}: at target", self.name)
        reason = (
            f"true rate {true_rate:.0f} msg/busy-s, need {required:.0f} msg/s at "
            f"{s.target_utilisation:.0%} -> {target}"
        )
        return ScalingDecision(target, reason, self.name, current=w)
