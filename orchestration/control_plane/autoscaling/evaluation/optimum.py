"""The offline optimum: the fewest worker-hours hindsight allows, the anchor of the benchmark.

With the whole trace known in advance, the cheapest schedule of worker counts that keeps the
lag within the SLA at every tick and rescales at most R times an hour on average, on the
simulator's own model: the same tick grid and arrivals, the same capacity of a count over the
partitions (and key buckets), the same loss of a rescale (moved tasks' pause, every task's
pause per bucket split or merge, a scale-up's start) and the same (min,+) fluid processing
within a step. The simulator starts every planning policy at the same count, and so does the
optimum; its first decision may rescale.

It is a dynamic programme over decision steps (`horizon.cheapest_schedule`). A state is the worker count running in the
step (and, exactly, the rescales used so far); what it carries is the set of Pareto labels
(cost so far, messages processed so far): of two ways to reach a state, one that cost no more
and processed no less dominates, since more processed never makes a later tick's lag worse.
Every label is extended by every count, the step run tick by tick, and any tick whose oldest
waiting message is older than the SLA drops the extension.

The rescale budget is an average over the replay (rescales <= R x hours): exactly, by carrying
the rescales used in the state (`exact=True`, for small traces); on a whole trace, by pricing a
rescale at lambda worker-steps and searching lambda (a Lagrangian relaxation). Each lambda's
plan is feasible, so the best plan within the budget is an upper bound of the optimum, and
cost(lambda) - lambda x budget of every lambda tried a lower bound; both are reported.

Spot interruptions are left out (random, and at 0.05 per worker-day a rounding error), and
worker counts are the efficient ones (`capacity.efficient_counts`; a count in between pays for
capacity it does not add) up to the one carrying twice the peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestration.control_plane.autoscaling.capacity import efficient_counts
from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.exceptions import NoFeasiblePlan
from orchestration.control_plane.autoscaling.fleet_model import FleetModel
from orchestration.control_plane.autoscaling.horizon import (
    ArrivalModel,
    OptimumPlan,
    cheapest_schedule,
)
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.simulator import SimulationResult, Simulator, Trace

__all__ = [
    "OfflineOptimum",
    "OptimumPlan",  # re-exported: the programme's plan
    "SchedulePolicy",
    "candidate_counts",
    "offline_optimum",
    "optimum_schedule",
    "replay_schedule",
]


@dataclass(frozen=True)
class OfflineOptimum:
    """The optimum for one budget: the best plan within it and the bound below it."""

    trace: str
    rescales_per_hour: float
    budget: int
    """Rescales allowed over the replay (rescales per hour x hours)."""
    hours: float
    step_s: float
    plan: OptimumPlan
    lower_bound_worker_hours: float
    """No schedule within the budget uses fewer worker-hours (equal to the plan's when exact)."""
    passes: int = 0
    """Passes of the programme it took."""
    replay: SimulationResult | None = field(default=None, compare=False)
    """The plan replayed through the simulator (its SLA minutes and rescales checked there)."""

    @property
    def worker_hours(self) -> float:
        return self.plan.worker_hours(self.step_s)

    @property
    def rescales(self) -> int:
        return self.plan.rescales

    @property
    def gap(self) -> float:
        """How far the plan may be above the true optimum, as a share of the bound."""
        lb = self.lower_bound_worker_hours
        return self.worker_hours / lb - 1.0 if lb > 0 else 0.0


class SchedulePolicy:
    """Asks for ``schedule[k]`` workers at decision k: a plan replayed through the simulator."""

    name = "optimum"

    def __init__(self, schedule: Sequence[int], step_s: float, name: str = "optimum") -> None:
        self.schedule = list(schedule)
        self.step_s = step_s
        self.name = name

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        k = min(len(history), len(self.schedule) - 1)
        return ScalingDecision(
            self.schedule[k], "the offline optimum", self.name, current=metrics.workers
        )


def candidate_counts(settings: AutoscaleSettings, peak_rate: float) -> list[int]:
    """The worker counts the optimum chooses among: efficient counts up to the one carrying
    twice the peak (more only drains faster what the SLA already allows)."""
    fleet = FleetModel.from_settings(settings.fleet)
    top = fleet.workers_for(2.0 * peak_rate)
    return efficient_counts(fleet.partitions, fleet.min_workers, top, fleet.max_factor)


def _model_of(sim: Simulator, counts: Sequence[int], start: int) -> ArrivalModel:
    """The simulator's own arrivals and SLA."""
    t = sim.t
    floor = np.interp(t - sim.settings.simulation.sla_s, t, sim.arrived, left=-np.inf)
    return ArrivalModel(
        sim.model,
        counts,
        start,
        sim.arrived,
        floor,
        sim.step_s,
        sim.ticks_per_step,
        sim.trace.name,
    )


class _Search:
    """The Lagrangian search on one trace; the passes it made are shared by every budget."""

    def __init__(self, model: ArrivalModel, max_passes: int) -> None:
        self.model = model
        self.max_passes = max_passes
        self.tried: dict[float, tuple[OptimumPlan, float]] = {}

    def at(self, lam: float) -> OptimumPlan:
        if lam not in self.tried:
            self.tried[lam] = cheapest_schedule(self.model, lam, None)
        return self.tried[lam][0]

    def result(self, budget: int) -> tuple[OptimumPlan, float]:
        fits = [p for p, _ in self.tried.values() if p.rescales <= budget]
        best = min(fits, key=lambda p: (p.worker_steps, p.rescales))
        bound = max(c - lam * budget for lam, (_, c) in self.tried.items())
        return best, bound

    def for_budget(self, budget: int, tolerance: float = 0.002) -> tuple[OptimumPlan, float]:
        """The best plan within ``budget`` rescales and the lower bound: lambda bisected (in
        its logarithm) until the plan is within ``tolerance`` of the bound or the passes run
        out."""
        passes = len(self.tried) + self.max_passes
        if self.at(0.0).rescales <= budget:
            return self.result(budget)
        fits = sorted(lam for lam, (p, _) in self.tried.items() if p.rescales <= budget)
        over = sorted(lam for lam, (p, _) in self.tried.items() if p.rescales > budget)
        hi = fits[0] if fits else 12.0  # a worker-hour at 5-minute steps
        while self.at(hi).rescales > budget:
            if len(self.tried) >= passes:
                raise NoFeasiblePlan(f"no rescale price up to {hi:.0f} worker-steps fits {budget}")
            hi *= 4.0
        lo = max([lam for lam in over if lam < hi], default=0.0)
        while len(self.tried) < passes:
            plan, bound = self.result(budget)
            if plan.worker_steps <= bound * (1.0 + tolerance) or hi - lo < 0.01 * hi:
                break
            mid = math.sqrt(lo * hi) if lo > 0 else hi / 4.0
            if self.at(mid).rescales > budget:
                lo = mid
            else:
                hi = mid
        return self.result(budget)


def optimum_schedule(
    sim: Simulator,
    budget: int,
    start: int | None = None,
    counts: Sequence[int] | None = None,
    exact: bool = False,
    max_passes: int = 10,
) -> tuple[OptimumPlan, float]:
    """The cheapest schedule on ``sim``'s trace with at most ``budget`` rescales and no tick
    beyond the SLA, and a lower bound of its worker-steps. ``exact`` carries the rescales in
    the state (small traces: the bound is the plan's cost); otherwise a rescale's price is
    searched (at most ``max_passes`` passes) and the bound is the Lagrangian one."""
    s = sim.settings
    start = sim.initial_workers(_Named()) if start is None else start
    counts = candidate_counts(s, float(sim.rate.max())) if counts is None else counts
    model = _model_of(sim, counts, start)
    if exact:
        return cheapest_schedule(model, 0.0, budget)
    return _Search(model, max_passes).for_budget(budget)


class _Named:
    name = "optimum"


def replay_schedule(sim: Simulator, plan: OptimumPlan, name: str = "optimum") -> SimulationResult:
    """The plan carried out by the simulator itself, with spot interruptions off: its SLA
    minutes, worker-hours and rescales as every policy's are measured."""
    quiet = sim.settings.updated(spot={"spot_share": 0.0})
    # the trace is already cut and scaled: doing both again changes nothing
    return Simulator(sim.trace, quiet).run(SchedulePolicy(plan.schedule, sim.step_s, name))


def offline_optimum(
    trace: Trace,
    settings: AutoscaleSettings,
    rescales_per_hour: Sequence[float] = (1.0, 2.0, 4.0),
    replay: bool = True,
    max_passes: int = 10,
) -> list[OfflineOptimum]:
    """The offline optimum of ``trace`` (cut and scaled as the simulator replays it) for each
    budget of rescales per hour (the search's passes shared), each plan replayed through the
    simulator."""
    sim = Simulator(trace, settings)
    hours = sim.steps * sim.step_s / 3600.0
    model = _model_of(
        sim, candidate_counts(settings, float(sim.rate.max())), sim.initial_workers(_Named())
    )
    search = _Search(model, max_passes)
    out = []
    for rate in sorted(rescales_per_hour):
        budget = math.floor(rate * hours + 1e-9)
        plan, bound = search.for_budget(budget)
        out.append(
            OfflineOptimum(
                trace=sim.trace.name,
                rescales_per_hour=rate,
                budget=budget,
                hours=hours,
                step_s=sim.step_s,
                plan=plan,
                lower_bound_worker_hours=bound * sim.step_s / 3600.0,
                passes=len(search.tried),
                replay=replay_schedule(sim, plan) if replay else None,
            )
        )
    return out
