"""`mcts`: the Metamarkets planner as a policy: measure, forecast, plan, carry out the first move.

Every decision re-plans from the measured backlog (a receding horizon), so forecast errors are
corrected one step later; the forecast is what lets the plan scale up before a daily ramp
instead of after the lag has built up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from orchestration.autoscaling.config import AutoscaleSettings
from orchestration.autoscaling.decision import ScalingDecision
from orchestration.autoscaling.forecast import SeasonalTrendForecaster
from orchestration.autoscaling.mcts import (
    MctsPlanner,
    PlanningProblem,
    sla_window_arrivals,
)
from orchestration.autoscaling.metrics import FleetMetrics, Metric
from orchestration.autoscaling.policies.base import last_finite, missing_decision

__all__ = ["MctsPolicy"]


class MctsPolicy:
    """Plans worker counts to the horizon with MCTS over the forecast traffic."""

    name = "mcts"

    def __init__(self, settings: AutoscaleSettings) -> None:
        self.settings = settings
        self.planner = MctsPlanner(settings.mcts)
        self.forecaster = SeasonalTrendForecaster(settings.forecast)
        self.last_plan = None

    @classmethod
    def from_settings(cls, settings: AutoscaleSettings) -> MctsPolicy:
        return cls(settings)

    def _recent(
        self, metrics: FleetMetrics, history: Sequence[FleetMetrics], span_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(time, input rate) of the snapshots within `span_s` before now, oldest first."""
        times, rates = [metrics.time], [metrics.input_rate]
        start = metrics.time - span_s
        for past in reversed(history):
            if past.time < start:
                break
            times.append(past.time)
            rates.append(past.input_rate)
        return np.array(times[::-1], dtype=float), np.array(rates[::-1], dtype=float)

    def problem(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> PlanningProblem:
        """The planning problem for this snapshot (exposed for tests and reports)."""
        s = self.settings
        m = s.mcts
        step = m.plan_step_s
        steps = max(1, math.ceil(m.horizon_s / step))
        worker_rate = last_finite(Metric.TRUE_PROCESSING_RATE, metrics, history)
        if not math.isfinite(worker_rate) or worker_rate <= 0:
            worker_rate = s.fleet.worker_rate
        sla_plan = s.simulation.sla_s * m.sla_safety
        span = s.forecast.season_s + m.horizon_s + s.forecast.smoothing_s + step
        times, rates = self._recent(metrics, history, span)
        if m.use_forecast:
            future = self.forecaster.forecast(times, rates, metrics.time, step, steps)
        else:
            future = np.full(steps, metrics.input_rate)
        future = np.where(np.isfinite(future), future, metrics.input_rate)
        future = future * (1.0 + m.forecast_margin)
        past_needed = math.ceil(sla_plan / step) + 1
        past = np.interp(metrics.time - (np.arange(past_needed)[::-1]) * step, times, rates)
        arrivals = sla_window_arrivals(past, future, step, sla_plan)
        return PlanningProblem(
            workers=metrics.workers,
            partitions=metrics.partitions,
            worker_rate=worker_rate,
            backlog=max(metrics.backlog, 0.0),
            rates=future,
            sla_arrivals=arrivals,
            step_s=step,
            min_workers=s.fleet.min_workers,
            max_workers=s.fleet.upper,
            rescale_pause_s=s.fleet.rescale_pause_s,
        )

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if (
            skip := missing_decision(self.name, metrics, Metric.INPUT_RATE, Metric.BACKLOG)
        ) is not None:
            return skip
        problem = self.problem(metrics, history)
        plan = self.planner.plan(problem, salt=int(metrics.time))
        self.last_plan = plan
        w = metrics.workers
        reason = f"plan: {plan.describe()} (cost {plan.cost:.2f})"
        if plan.first == w:
            return ScalingDecision(w, reason, self.name, predicted_cost=plan.cost, current=w)
        return ScalingDecision(plan.first, reason, self.name, predicted_cost=plan.cost, current=w)
