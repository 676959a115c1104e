"""The offline optimum against brute force: every schedule of a small trace run through the
simulator itself, the cheapest one with no SLA minute and at most the budget of rescales."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from autoscale_builders import trace_of

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.evaluation.optimum import (
    OptimumPlan,
    SchedulePolicy,
    candidate_counts,
    offline_optimum,
    optimum_schedule,
    replay_schedule,
)
from orchestration.control_plane.autoscaling.exceptions import NoFeasiblePlan
from orchestration.control_plane.autoscaling.simulator import Simulator


def small(settings: AutoscaleSettings, sla_s: float = 600.0) -> AutoscaleSettings:
    """8 partitions, at most 4 workers of 1000 msg/s, real pauses and a 20 s start."""
    return settings.updated(
        fleet={
            "partitions": 8,
            "worker_rate": 1000.0,
            "max_workers": 4,
            "move_pause_s": 6.0,
            "state_mb_per_task": 0.0,
            "scale_up_start_s": 20.0,
        },
        simulation={"peak_rate": 3500.0, "step_s": 300.0, "tick_s": 10.0, "sla_s": sla_s},
        spot={"spot_share": 0.0},
    )


def brute_force(sim: Simulator, counts: list[int]) -> dict[int, float]:
    """Fewest worker-hours with no SLA minute, by the most rescales allowed: every schedule
    through the simulator."""
    best: dict[int, float] = {}
    for schedule in itertools.product(counts, repeat=sim.steps):
        summary = sim.run(SchedulePolicy(schedule, sim.step_s)).summary()
        if summary.sla_violation_minutes > 0:
            continue
        r = summary.rescales
        best[r] = min(best.get(r, np.inf), summary.worker_hours)
    # at most r rescales: the best of every count up to r
    top = max(best)
    return {
        r: min(v for q, v in best.items() if q <= r)
        for r in range(top + 1)
        if any(q <= r for q in best)
    }


TRACES = {
    # a ramp past two workers' capacity and back: the backlog the SLA allows saves a worker
    "ramp": [1.0, 2.4, 3.5, 3.2, 1.5, 1.0],
    # two bursts an SLA apart: hold through both or follow each
    "bursts": [1.0, 3.5, 1.0, 1.0, 3.4, 1.2],
}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_exact_optimum_is_the_cheapest_schedule_brute_force_finds(
    settings: AutoscaleSettings, name: str
) -> None:
    s = small(settings)
    sim = Simulator(trace_of(TRACES[name], name=name), s)
    counts = candidate_counts(s, float(sim.rate.max()))
    assert counts == [1, 2, 3, 4]
    truth = brute_force(sim, counts)
    assert len(set(truth.values())) > 1, "the budget must matter on this trace"
    for budget, worker_hours in truth.items():
        plan, bound = optimum_schedule(sim, budget, exact=True)
        assert plan.worker_hours(sim.step_s) == pytest.approx(worker_hours)
        assert plan.rescales <= budget
        assert bound * sim.step_s / 3600.0 == pytest.approx(worker_hours)
        replay = replay_schedule(sim, plan).summary()
        assert replay.sla_violation_minutes == 0
        assert replay.rescales == plan.rescales
        assert replay.worker_hours == pytest.approx(worker_hours)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_searched_optimum_is_feasible_and_brackets_the_truth(
    settings: AutoscaleSettings, name: str
) -> None:
    s = small(settings)
    sim = Simulator(trace_of(TRACES[name], name=name), s)
    truth = brute_force(sim, candidate_counts(s, float(sim.rate.max())))
    hours = sim.steps * sim.step_s / 3600.0  # 25 minutes: 1 an hour allows none
    results = offline_optimum(sim.trace, s, rescales_per_hour=(1.0, 2.4, 4.8, 100.0))
    for result in results:
        assert result.budget == int(result.rescales_per_hour * hours)
        budget = min(result.budget, max(truth))
        assert result.rescales <= result.budget
        assert result.lower_bound_worker_hours <= truth[budget] + 1e-9
        assert truth[budget] <= result.worker_hours + 1e-9
        assert result.replay is not None
        summary = result.replay.summary()
        assert summary.sla_violation_minutes == 0
        assert summary.worker_hours == pytest.approx(result.worker_hours)
    # unbounded, the relaxation is exact: no rescale price at all
    assert results[-1].worker_hours == pytest.approx(min(truth.values()))
    assert results[-1].gap == pytest.approx(0.0)


def test_a_trace_no_count_can_carry_has_no_plan(settings: AutoscaleSettings) -> None:
    s = small(settings, sla_s=300.0).updated(fleet={"max_workers": 2})
    sim = Simulator(trace_of([1.0, 3.5, 3.5, 3.5, 1.0], name="flood"), s)
    with pytest.raises(NoFeasiblePlan, match="no worker count keeps the lag within the SLA"):
        optimum_schedule(sim, budget=4, exact=True)


def test_a_plan_replays_as_the_schedule_it_names(settings: AutoscaleSettings) -> None:
    s = small(settings)
    sim = Simulator(trace_of(TRACES["ramp"], name="ramp"), s)
    plan = OptimumPlan((2, 4, 4, 2, 2), worker_steps=14, rescales=2)
    result = replay_schedule(sim, plan)
    assert [r.workers for r in result.records] == [2, 4, 4, 2, 2]
    assert result.summary().worker_hours == pytest.approx(14 * 300 / 3600)
