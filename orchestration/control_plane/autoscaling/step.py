"""One decision step, shared by the live sensor and the simulator.

metrics and history -> policy -> guards -> decision: the autoscaler sensor calls it on every tick
with what the workers reported, the simulator on every step with what it modelled, so a
policy meets the same guards in the same order in both places and what the simulator shows
is what the live fleet does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.policies.base import ScalingPolicy
from orchestration.control_plane.autoscaling.vetoes import Guard, GuardContext, apply_guards

__all__ = ["Step", "decide"]


@dataclass(frozen=True)
class Step:
    """What one decision step settled on, and what the policy had proposed."""

    decision: ScalingDecision
    proposed: ScalingDecision
    vetoed_by: str | None
    decision_s: float
    """Wall-clock seconds the policy took to decide (guards excluded)."""


def decide(
    policy: ScalingPolicy,
    metrics: FleetMetrics,
    history: Sequence[FleetMetrics],
    guards: Sequence[Guard],
    last_rescale_at: float | None,
) -> Step:
    """The policy's decision on ``metrics`` (``history`` = the snapshots before it), reviewed
    by ``guards`` at ``metrics.time``."""
    started = time.perf_counter()
    proposed = policy.decide(metrics, history)
    elapsed = time.perf_counter() - started
    verdict = apply_guards(
        proposed, metrics, guards, GuardContext(now=metrics.time, last_rescale_at=last_rescale_at)
    )
    return Step(verdict.decision, proposed, verdict.guard, elapsed)
