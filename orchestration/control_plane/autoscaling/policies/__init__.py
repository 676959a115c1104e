"""Scaling policies: one protocol, one small module each, one registry of factories by name.

May import: the rest of ``orchestration.control_plane.autoscaling``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from orchestration.control_plane.autoscaling.config import (
    DEPRECATED_SEARCH,
    POLICY_NAMES,
    AutoscaleSettings,
)
from orchestration.control_plane.autoscaling.exceptions import UnknownPolicy
from orchestration.control_plane.autoscaling.policies.base import ScalingPolicy
from orchestration.control_plane.autoscaling.policies.ds2 import Ds2Policy
from orchestration.control_plane.autoscaling.policies.horizon import HorizonPolicy
from orchestration.control_plane.autoscaling.policies.keda import KedaPolicy
from orchestration.control_plane.autoscaling.policies.mcts import MctsPolicy
from orchestration.control_plane.autoscaling.policies.static import StaticPolicy
from orchestration.control_plane.autoscaling.policies.threshold import ThresholdPolicy

__all__ = [
    "COMPARED",
    "POLICIES",
    "Ds2Policy",
    "HorizonPolicy",
    "KedaPolicy",
    "MctsPolicy",
    "ScalingPolicy",
    "StaticPolicy",
    "ThresholdPolicy",
    "make_policy",
]

PolicyFactory = Callable[[AutoscaleSettings], ScalingPolicy]

# name -> factory, in the order reports list them
POLICIES: dict[str, PolicyFactory] = {
    "static": StaticPolicy.from_settings,
    "threshold": ThresholdPolicy.from_settings,
    "ds2": Ds2Policy.from_settings,
    "keda": KedaPolicy.from_settings,
    "mcts": MctsPolicy.from_settings,
    "horizon": HorizonPolicy.from_settings,
}
assert tuple(POLICIES) == POLICY_NAMES, "the policy registry is out of step with the settings"

COMPARED = ("static", "threshold", "ds2", "keda", "mcts")
"""What "all" runs in ``sluice autoscale simulate`` and the benchmark: the baselines and the
default planner. ``horizon``, the optimum's programme as a planner, is opt-in: run it by name."""


def make_policy(name: str, settings: AutoscaleSettings) -> ScalingPolicy:
    """A fresh policy (policies may keep state between decisions, so never share one).

    ``mcts`` with the deprecated ``mcts.search = "horizon"`` is the ``horizon`` policy (with
    a FutureWarning): what that setting asked for before the programme was a policy."""
    if name == "mcts" and settings.mcts.search == "horizon":
        warnings.warn(DEPRECATED_SEARCH, FutureWarning, stacklevel=2)
        name = "horizon"
    try:
        factory = POLICIES[name]
    except KeyError:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return factory(settings)
