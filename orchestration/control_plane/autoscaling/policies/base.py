"""The one interface every scaling policy implements, and the helpers they share.

A policy is a function of what was measured (the current snapshot and the history before it) to
a `ScalingDecision`; it never acts. Missing or NaN inputs give "no change" with a warning, so a
broken collector can never scale the fleet to zero.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric

__all__ = ["ScalingPolicy", "bounded", "last_finite", "missing_decision"]

logger = logging.getLogger(__name__)


@runtime_checkable
class ScalingPolicy(Protocol):
    """Current metrics and history in, target worker count and a reason out."""

    name: str

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision: ...


def missing_decision(policy: str, metrics: FleetMetrics, *needed: Metric) -> ScalingDecision | None:
    """A logged no-change decision if any of `needed` is missing, else None."""
    missing = metrics.missing(*needed)
    if not missing:
        return None
    names = ", ".join(m.field_name for m in missing)
    logger.warning("%s: no change at t=%s: missing metrics %s", policy, metrics.time, names)
    return ScalingDecision.no_change(metrics.workers, f"missing metrics: {names}", policy)


def last_finite(
    metric: Metric, metrics: FleetMetrics, history: Sequence[FleetMetrics], lookback: int = 50
) -> float:
    """The metric now, or its latest finite value in the recent history, else NaN."""
    value = metrics.get(metric)
    if math.isfinite(value):
        return value
    for past in reversed(history[-lookback:]):
        value = past.get(metric)
        if math.isfinite(value):
            return value
    return math.nan


def bounded(target: int, lo: int, hi: int) -> int:
    """Clamp a target into [lo, hi]."""
    return max(lo, min(hi, int(target)))
