"""Vetoes between a policy's decision and the realizer (the guards: bounds, cooldown,
hysteresis), each saying why it vetoed. Not to be confused with the Guardian
(:mod:`.guardian`), which carries a decided change out.

They hold no state of their own (the caller passes when the fleet last rescaled), so the same
guards serve the simulator and the autoscaler sensor, whose cursor keeps that time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics

__all__ = [
    "BoundsGuard",
    "CooldownGuard",
    "Guard",
    "GuardContext",
    "GuardVerdict",
    "HysteresisGuard",
    "apply_guards",
    "default_guards",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardContext:
    """What guards may look at besides the decision: now and the time of the last rescale."""

    now: float
    last_rescale_at: float | None = None


@dataclass(frozen=True)
class GuardVerdict:
    """The decision to carry out, and which guard changed it and why (None: nobody did)."""

    decision: ScalingDecision
    guard: str | None = None
    reason: str | None = None

    @property
    def vetoed(self) -> bool:
        return self.guard is not None


class Guard(Protocol):
    name: str

    def review(
        self, decision: ScalingDecision, metrics: FleetMetrics, context: GuardContext
    ) -> GuardVerdict: ...


@dataclass(frozen=True)
class BoundsGuard:
    """Clamps the target into [min_workers, max_workers] (and the tasks the partitions can be
    split into: more workers would idle)."""

    min_workers: int
    max_workers: int
    name: str = "bounds"
    max_factor: int = 1

    def review(
        self, decision: ScalingDecision, metrics: FleetMetrics, context: GuardContext
    ) -> GuardVerdict:
        tasks = metrics.partitions * self.max_factor
        hi = min(self.max_workers, tasks) if tasks else self.max_workers
        target = max(self.min_workers, min(hi, decision.target))
        if target == decision.target:
            return GuardVerdict(decision)
        reason = f"target {decision.target} outside [{self.min_workers}, {hi}]: clamped to {target}"
        return GuardVerdict(decision.with_target(target, reason), self.name, reason)


@dataclass(frozen=True)
class CooldownGuard:
    """Vetoes a rescale sooner than `cooldown_s` after the previous one."""

    cooldown_s: float
    name: str = "cooldown"

    def review(
        self, decision: ScalingDecision, metrics: FleetMetrics, context: GuardContext
    ) -> GuardVerdict:
        last = context.last_rescale_at
        if self.cooldown_s <= 0 or not decision.is_change or last is None:
            return GuardVerdict(decision)
        since = context.now - last
        if since >= self.cooldown_s:
            return GuardVerdict(decision)
        reason = (
            f"cooldown: last rescale {since:.0f} s ago < {self.cooldown_s:.0f} s "
            f"(wanted {decision.target})"
        )
        return GuardVerdict(
            ScalingDecision.no_change(metrics.workers, reason, self.name), self.name, reason
        )


@dataclass(frozen=True)
class HysteresisGuard:
    """Vetoes changes of at most `workers` workers (small moves cost a pause, gain little)."""

    workers: int
    name: str = "hysteresis"

    def review(
        self, decision: ScalingDecision, metrics: FleetMetrics, context: GuardContext
    ) -> GuardVerdict:
        delta = abs(decision.target - metrics.workers)
        if self.workers <= 0 or delta == 0 or delta > self.workers:
            return GuardVerdict(decision)
        reason = (
            f"hysteresis: change of {delta} <= {self.workers} workers (wanted {decision.target})"
        )
        return GuardVerdict(
            ScalingDecision.no_change(metrics.workers, reason, self.name), self.name, reason
        )


def default_guards(settings: AutoscaleSettings, *, cooldown_s: float | None = None) -> list[Guard]:
    """Bounds, then cooldown (``settings.guards.cooldown_s`` unless ``cooldown_s`` is given:
    the live sensor's own) and hysteresis as configured: one guard of each kind."""
    fleet = settings.fleet
    return [
        BoundsGuard(fleet.min_workers, fleet.upper, max_factor=fleet.max_bucket_factor),
        CooldownGuard(settings.guards.cooldown_s if cooldown_s is None else cooldown_s),
        HysteresisGuard(settings.guards.hysteresis_workers),
    ]


def apply_guards(
    decision: ScalingDecision,
    metrics: FleetMetrics,
    guards: Sequence[Guard],
    context: GuardContext,
) -> GuardVerdict:
    """Run the guards in order; the first veto that leaves no change ends the review."""
    verdict = GuardVerdict(decision)
    for guard in guards:
        step = guard.review(verdict.decision, metrics, context)
        if step.vetoed:
            logger.debug("guard %s: %s", step.guard, step.reason)
            verdict = step
            if not step.decision.is_change:
                break
    return verdict
