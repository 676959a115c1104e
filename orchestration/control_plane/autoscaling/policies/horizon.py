"""`horizon`: the offline optimum's exact programme, run over the forecast horizon at every
decision, and its first move carried out.

It plans on the `mcts` policy's planning problem (the same forecast, measured worker rate,
rescale budget and floor), so the two differ only in the search: where the tree search prices
a plan's lag, this one holds the SLA (times ``sla_safety``) at every tick, and prices a rescale
``horizon_rescale_price_h`` plus ``horizon_rescale_price_per_worker_h`` x the new count (times
the budget's factor) on top of the capacity its pause and start lose. Where no schedule holds
the SLA under the forecast, the tree search decides.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.exceptions import NoFeasiblePlan
from orchestration.control_plane.autoscaling.horizon import horizon_plan
from orchestration.control_plane.autoscaling.mcts import PlanningProblem, efficient_levels
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.policies.base import missing_decision
from orchestration.control_plane.autoscaling.policies.mcts import MctsPolicy

__all__ = ["HorizonPolicy"]


class HorizonPolicy:
    """Plans worker counts to the horizon with the optimum's programme on the forecast."""

    name = "horizon"

    def __init__(self, settings: AutoscaleSettings) -> None:
        self.settings = settings
        self.tree = MctsPolicy(settings)
        """The planning problem's source, and the search where no schedule holds the SLA."""

    @classmethod
    def from_settings(cls, settings: AutoscaleSettings) -> HorizonPolicy:
        return cls(settings)

    def problem(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> PlanningProblem:
        """The planning problem for this snapshot: the `mcts` policy's."""
        return self.tree.problem(metrics, history)

    def first_move(self, metrics: FleetMetrics, p: PlanningProblem) -> ScalingDecision | None:
        """The first move of the programme over ``p``'s horizon, or None where no schedule
        holds the SLA under the forecast."""
        m = self.settings.mcts
        floor = min(p.down_floor, metrics.workers) if p.down_floor > 0 else 0
        # as the offline optimum, no count above the one carrying twice the forecast peak (or
        # draining the backlog in half the SLA): more only drains faster what the SLA allows,
        # and every count more is a row and a column more of the programme's pairs
        sla_plan = self.settings.simulation.sla_s * m.sla_safety
        fleet = p.fleet
        top = max(
            fleet.workers_for(2.0 * max(float(np.max(p.rates)), p.backlog / sla_plan)),
            metrics.workers,
        )
        levels = efficient_levels(p.partitions, p.min_workers, top, p.max_factor)
        counts = [c for c in levels if c >= floor] or [metrics.workers]
        to_steps = p.penalty_factor * 3600.0 / p.step_s  # worker-hours -> worker-steps
        price = m.horizon_rescale_price_h * to_steps
        per_worker = m.horizon_rescale_price_per_worker_h * to_steps
        try:
            plan = horizon_plan(
                fleet,
                metrics.workers,
                p.backlog,
                metrics.time_lag,
                p.rates,
                p.step_s,
                sla_plan,
                price,
                per_worker,
                counts=counts,
            )
        except NoFeasiblePlan:
            return None
        first = plan.schedule[0]
        hold = sum(1 for _ in itertools.takewhile(lambda n: n == first, plan.schedule))
        reason = (
            f"horizon plan: {first} for {hold * p.step_s / 60:.0f} min, "
            f"{plan.rescales} rescales in {len(plan.schedule) * p.step_s / 3600:.1f} h"
        )
        return ScalingDecision(
            first,
            reason,
            self.name,
            predicted_cost=float(plan.worker_steps) * p.step_s / 3600.0,
            current=metrics.workers,
            explanation={
                "search": "horizon",
                "schedule": list(plan.schedule),
                "rescale_price_worker_steps": price,
                "rescale_price_per_worker_steps": per_worker,
                "down_floor": p.down_floor,
                "worker_rate": p.worker_rate,
            },
        )

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if (
            skip := missing_decision(self.name, metrics, Metric.INPUT_RATE, Metric.BACKLOG)
        ) is not None:
            return skip
        problem = self.problem(metrics, history)
        decision = self.first_move(metrics, problem)
        if decision is not None:
            return decision
        return replace(self.tree.plan(metrics, problem), policy=self.name)
