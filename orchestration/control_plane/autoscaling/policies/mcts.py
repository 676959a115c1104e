"""`mcts`: the Metamarkets planner as a policy: measure, forecast, plan, carry out the first move.

Every decision re-plans from the measured backlog (a receding horizon), so forecast errors are
corrected one step later; the forecast is what lets the plan scale up before a daily ramp
instead of after the lag has built up.

A receding horizon re-plans every few minutes, so a plan that rescales once can be replaced by
one that rescales back before the first has paid off. Three things read from the fleet's own
history keep that in check: the rescale penalty rises while the fleet has rescaled faster than
its budget over the last day, the plan never goes down below the count that carries the last
hour's mean rate, and a count reached by a rescale keeps what is left of its dwell (off by
default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from orchestration.control_plane.autoscaling.capacity import workers_for_rate
from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.forecast import SeasonalTrendForecaster
from orchestration.control_plane.autoscaling.mcts import (
    MctsPlanner,
    PlanningProblem,
    sla_window_arrivals,
)
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.pause import PauseModel, fleet_pause_s
from orchestration.control_plane.autoscaling.policies.base import missing_decision

__all__ = ["MctsPolicy"]

_MAX_PENALTY_EXPONENT = 5.0  # the budget multiplies the penalty by at most e^5 (about 150)
LOADED_UTILISATION = 0.5
"""A worker at least this busy shows its true rate; below it, fixed costs dominate."""
RATE_LOOKBACK = 60
"""Snapshots searched back for a loaded reading (30 minutes of the live sensor's ticks)."""
RESCALE_TRANSIT_S = 120.0
"""Changes of the worker count in one direction within this long are one rescale seen
half-way (the live sensor snapshots a fleet whose new workers are still starting)."""


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

    def penalty_factor(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> float:
        """How much the rescale penalty is scaled for this decision: e^(gain * (used /
        allowed - 1)) for the fleet's rescales over the budget window, at least
        `rescale_budget_floor`.

        A fixed penalty cannot fit every traffic: one high enough to stop noisy traffic from
        rescaling every few minutes makes a smooth daily curve hold idle workers for hours.
        Above the budget, a rescale is priced by what the budget has left; below it, the
        price may fall (to `rescale_budget_floor` of the configured one; off by default), so a
        budget left unused buys worker-hours: an online estimate of the budget's shadow price
        from the fleet's own rescales (at the price of following a noisy flat load's dips). It
        never falls to nothing: a free rescale is what has a plan dip for five minutes and
        come back. Rescales are counted from the snapshots (a change of worker
        count; changes in one direction within RESCALE_TRANSIT_S are one), so the live
        sensor gets the same penalty.
        """
        m = self.settings.mcts
        if m.rescale_budget_per_h <= 0:
            return 1.0
        start = metrics.time - m.rescale_budget_window_s
        used, newer, first = 0, metrics.workers, metrics.time
        later: tuple[float, bool] | None = None  # (when, whether up) of the later change
        for past in reversed(history):
            if past.time < start:
                break
            if past.workers != newer:
                up = newer > past.workers
                # a rescale seen half-way (1 -> 2 -> 3 while its workers start) is one
                if later is None or later[1] != up or later[0] - first >= RESCALE_TRANSIT_S:
                    used += 1
                later = (first, up)
            newer, first = past.workers, past.time
        hours = max(metrics.time - first, m.rescale_budget_min_span_s) / 3600.0
        excess = used / (m.rescale_budget_per_h * hours) - 1.0
        factor = math.exp(min(m.rescale_budget_gain * excess, _MAX_PENALTY_EXPONENT))
        return max(factor, m.rescale_budget_floor)

    def dwell_left_s(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> float:
        """What is left of the dwell of the rescale that set the current count, from the
        snapshots (the last one still reporting another count is when it was decided), so the
        live sensor, which keeps no planner between ticks, honours it too."""
        # the rescale that set the count moved about one worker's share of the tasks
        share = fleet_pause_s(
            metrics.workers + 1, metrics.workers, metrics.partitions, self.task_pause_s()
        )
        dwell = self.planner.dwell_s(metrics.workers, float(share))
        if dwell <= 0:
            return 0.0
        for past in reversed(history):
            if metrics.time - past.time >= dwell:
                break
            if past.workers != metrics.workers:
                return dwell - (metrics.time - past.time)
        return 0.0

    def worker_rate(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> float:
        """What one worker carries, msg per busy-second: the busy-time-weighted mean of the
        true-rate readings of the last RATE_LOOKBACK snapshots taken while the fleet was busy
        (utilisation >= LOADED_UTILISATION), else of every finite one, else the configured rate.

        One reading covers a worker's last status interval (seconds), shorter than its flush
        and checkpoint intervals: a reading that caught a checkpoint shows a worker busy with
        few records, one that missed it a worker that never pays for it. Weighted by the busy
        worker-seconds they cover, readings add up to records over busy time, so those costs
        count at their share and one stalled interval cannot resize the fleet (as Flink's
        autoscaler averages the true rate over its metrics window). A nearly idle worker's
        fixed costs (polls, small batches) read as a rate several times too low, so loaded
        readings come first. The first snapshot after a change of worker count is no reading
        at all: its busy time is the moved tasks' restore, which would size one worker's
        traffic as several workers' work."""
        recent = [*history[-RATE_LOOKBACK - 1 :], metrics]
        loaded: list[tuple[float, float]] = []  # (rate, busy worker-seconds per second)
        finite: list[tuple[float, float]] = []
        for i, snapshot in enumerate(recent):
            rate, busy = snapshot.true_processing_rate, snapshot.utilisation * snapshot.workers
            if not math.isfinite(rate) or rate <= 0 or not math.isfinite(busy) or busy <= 0:
                continue
            if i > 0 and recent[i - 1].workers != snapshot.workers:
                continue  # the hand-off's restore, not the traffic
            finite.append((rate, busy))
            if snapshot.utilisation >= LOADED_UTILISATION:
                loaded.append((rate, busy))
        readings = loaded or finite
        if not readings:
            return self.settings.fleet.worker_rate
        return sum(rate * busy for rate, busy in readings) / sum(busy for _, busy in readings)

    def task_pause_s(self) -> float:
        """How long a moved task stands still: the fleet's pause model at its state per task."""
        fleet = self.settings.fleet
        return PauseModel.from_settings(fleet).task_pause_s(fleet.state_mb_per_task)

    def down_floor(
        self, metrics: FleetMetrics, times: np.ndarray, rates: np.ndarray, worker_rate: float
    ) -> int:
        """Fewest workers that carry the mean input rate of the last `down_floor_window_s`
        (0: no floor): the plan never scales down below it, so a forecast that dips with the
        noise cannot take the fleet down to a count the traffic will need back within the
        hour."""
        window = self.settings.mcts.down_floor_window_s
        recent = rates[(times > metrics.time - window) & np.isfinite(rates)]
        if window <= 0 or recent.size == 0:
            return 0
        fleet = self.settings.fleet
        mean = float(np.mean(recent))
        return workers_for_rate(
            mean, metrics.partitions, worker_rate, fleet.upper, fleet.max_bucket_factor
        )

    def problem(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> PlanningProblem:
        """The planning problem for this snapshot (exposed for tests and reports)."""
        s = self.settings
        m = s.mcts
        step = m.plan_step_s
        steps = max(1, math.ceil(m.horizon_s / step))
        worker_rate = self.worker_rate(metrics, history)
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
        factor = self.penalty_factor(metrics, history)
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
            task_pause_s=self.task_pause_s(),
            scale_up_start_s=s.fleet.scale_up_start_s,
            dwell_left_s=self.dwell_left_s(metrics, history),
            penalty_factor=factor,
            down_floor=self.down_floor(metrics, times, rates, worker_rate),
            max_factor=s.fleet.max_bucket_factor,
        )

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if (
            skip := missing_decision(self.name, metrics, Metric.INPUT_RATE, Metric.BACKLOG)
        ) is not None:
            return skip
        return self.plan(metrics, self.problem(metrics, history))

    def plan(self, metrics: FleetMetrics, problem: PlanningProblem) -> ScalingDecision:
        """The tree search's first move on ``problem`` (the planning problem of ``metrics``)."""
        plan = self.planner.plan(problem, salt=int(metrics.time))
        self.last_plan = plan
        w = metrics.workers
        reason = f"plan: {plan.describe()} (cost {plan.cost:.2f})"
        explanation = {
            **plan.explain(),
            "task_pause_s": problem.task_pause_s,
            "penalty_factor": problem.penalty_factor,
            "down_floor": problem.down_floor,
            "worker_rate": problem.worker_rate,
        }
        return ScalingDecision(
            plan.first,
            reason,
            self.name,
            predicted_cost=plan.cost,
            current=w,
            explanation=explanation,
        )
