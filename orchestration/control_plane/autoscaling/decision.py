"""The value a policy returns: a target worker count and why, never an action.

Policies decide, guards may veto, and only then a realizer acts; keeping the decision a plain
value makes each of those steps testable on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ScalingDecision"]


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """Target worker count, the reason in words, and which policy (or guard) said so.

    `current` is the worker count the decision was made against (None if unknown);
    `predicted_cost` is the planner's cost of the chosen plan, if the policy has one.
    """

    target: int
    reason: str
    policy: str
    predicted_cost: float | None = None
    current: int | None = None
    explanation: dict[str, Any] | None = None
    """What a planning policy weighed (JSON-able): the plan it chose over the horizon, its cost
    split, the best alternative it rejected, the prices it used."""

    @classmethod
    def no_change(cls, current: int, reason: str, policy: str = "") -> ScalingDecision:
        """The sentinel for "keep the fleet as it is" (missing metrics, inside the band...)."""
        return cls(target=current, reason=reason, policy=policy, current=current)

    @property
    def is_change(self) -> bool:
        """True if carrying out the decision would rescale the fleet."""
        return self.current is None or self.target != self.current

    def with_target(self, target: int, reason: str, policy: str | None = None) -> ScalingDecision:
        """A copy with another target (used by guards that clamp)."""
        return replace(
            self, target=target, reason=reason, policy=self.policy if policy is None else policy
        )
