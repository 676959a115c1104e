"""`keda`: the KEDA Kafka scaler behind a Kubernetes HPA: replicas = ceil(lag / lagThreshold).

Replicas are capped at the partition count (more consumers than partitions idle); the HPA's
tolerance ignores small ratio changes and its stabilisation window makes a scale-down go only to
the largest recommendation of the window, which is all that stands between it and flapping.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from orchestration.control_plane.autoscaling.config import AutoscaleSettings, KedaSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.policies.base import bounded, missing_decision

__all__ = ["KedaPolicy"]


class KedaPolicy:
    """Lag-proportional replica count with HPA tolerance and scale-down stabilisation."""

    name = "keda"

    def __init__(self, settings: KedaSettings, min_workers: int, max_workers: int) -> None:
        self.s = settings
        self.lo = min_workers
        self.hi = max_workers
        self._recent: deque[tuple[float, int]] = deque()

    @classmethod
    def from_settings(cls, settings: AutoscaleSettings) -> KedaPolicy:
        return cls(settings.keda, settings.fleet.min_workers, settings.fleet.upper)

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if (skip := missing_decision(self.name, metrics, Metric.BACKLOG)) is not None:
            return skip
        s, w = self.s, metrics.workers
        lag = max(metrics.backlog, 0.0)
        desired = math.ceil(lag / s.lag_threshold - 1e-9)
        desired = bounded(min(desired, metrics.partitions), self.lo, self.hi)
        ratio = lag / (w * s.lag_threshold) if w else math.inf
        if abs(ratio - 1.0) <= s.tolerance:
            desired = w
        now = metrics.time
        self._recent.append((now, desired))
        while self._recent and self._recent[0][0] < now - s.stabilisation_window_s:
            self._recent.popleft()
        target = desired
        if desired < w:
            target = min(w, max(t for _, t in self._recent))
        if target == w:
            return ScalingDecision.no_change(w, f"lag {lag:.0f} msg: {desired} replicas", self.name)
        reason = f"lag {lag:.0f} msg / threshold {s.lag_threshold:.0f} -> {target} replicas"
        return ScalingDecision(target, reason, self.name, current=w)
