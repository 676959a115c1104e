"""One fleet model: the simulator, the tree search and the horizon search see the same backlog.

Each is fed the same trace and the same worker counts (with rescales, whose pauses and starts
each model charges) and must give the same backlog at every step.
"""

from __future__ import annotations

import numpy as np
import pytest
from autoscale_builders import trace_of

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.evaluation.optimum import SchedulePolicy
from orchestration.control_plane.autoscaling.fleet_model import FleetModel, processed
from orchestration.control_plane.autoscaling.horizon import ArrivalModel, forecast_model
from orchestration.control_plane.autoscaling.mcts import MctsPlanner, PlanningProblem
from orchestration.control_plane.autoscaling.simulator import Simulator

# msg/s at each 5-minute point: a ramp past what 2 workers carry, a burst, a lull
RATES = [1200.0, 1800.0, 3500.0, 4000.0, 2600.0, 900.0, 400.0, 3800.0, 4000.0, 1500.0, 700.0]
SCHEDULE = [1, 2, 4, 4, 3, 3, 1, 1, 6, 6]
"""Worker counts of the 10 steps the trace spans (from 2): too few, then enough, rescaling
both ways, the first move included."""


def settings_for(base: AutoscaleSettings, ticks_per_step: int) -> AutoscaleSettings:
    return base.updated(
        fleet={
            "partitions": 8,
            "worker_rate": 1000.0,
            "max_workers": 8,
            "move_pause_s": 20.0,
            "move_pause_per_state_mb_s": 0.0,
            "scale_up_start_s": 40.0,
        },
        simulation={
            "peak_rate": max(RATES),
            "step_s": 300.0,
            "tick_s": 300.0 / ticks_per_step,
            "sla_s": 3600.0,
        },
    )


def simulated(s: AutoscaleSettings) -> tuple[Simulator, int, np.ndarray]:
    """The simulator on the trace, its starting count and its backlog at each step's end."""
    sim = Simulator(trace_of(RATES), s)
    policy = SchedulePolicy(SCHEDULE, sim.step_s)
    start = sim.initial_workers(policy)
    result = sim.run(policy, guards=[])
    assert [r.workers for r in result.records] == SCHEDULE
    assert sum(r.rescaled for r in result.records) == 6  # the pauses are in the comparison
    return sim, start, np.array([r.backlog for r in result.records])


def test_the_simulator_the_tree_search_and_the_horizon_search_agree_on_a_trace(
    settings: AutoscaleSettings,
) -> None:
    s = settings_for(settings, ticks_per_step=1)
    sim, start, backlog_sim = simulated(s)
    fleet = FleetModel.from_settings(s.fleet)
    rates = np.diff(sim.arrived) / sim.step_s  # the trace's mean rate in each step

    problem = PlanningProblem(
        workers=start,
        partitions=fleet.partitions,
        worker_rate=fleet.worker_rate,
        backlog=0.0,
        rates=rates,
        sla_arrivals=np.full(rates.size, np.inf),
        step_s=sim.step_s,
        max_workers=fleet.max_workers,
        task_pause_s=fleet.task_pause_s,
        scale_up_start_s=fleet.scale_up_start_s,
    )
    backlog_tree = MctsPlanner(s.mcts).backlog(problem, SCHEDULE)

    horizon = forecast_model(
        fleet, start, 0.0, 0.0, rates, sim.step_s, s.simulation.sla_s, SCHEDULE, ticks_per_step=1
    )
    backlog_horizon = horizon.backlog(SCHEDULE)

    assert backlog_sim.max() > 1e5  # the fleet falls behind, so the backlog is tested
    assert (backlog_sim == 0).any()  # and catches up, so its floor at zero is
    assert backlog_tree == pytest.approx(backlog_sim, rel=1e-9, abs=1e-6)
    assert backlog_horizon == pytest.approx(backlog_sim, rel=1e-9, abs=1e-6)


def test_the_simulator_and_the_horizon_search_agree_tick_by_tick(
    settings: AutoscaleSettings,
) -> None:
    """With 10 ticks a step the backlog may empty within a step; the horizon search, fed the
    simulator's arrivals (as the offline optimum is), still sees what the simulator does."""
    s = settings_for(settings, ticks_per_step=10)
    sim, start, backlog_sim = simulated(s)
    floor = np.full(sim.arrived.size, -np.inf)
    model = ArrivalModel(
        sim.model, SCHEDULE, start, sim.arrived, floor, sim.step_s, sim.ticks_per_step, "t"
    )
    assert model.backlog(SCHEDULE) == pytest.approx(backlog_sim, rel=1e-9, abs=1e-6)


def test_processed_is_lindleys_recursion() -> None:
    """The closed form against the queue stepped one interval at a time."""
    rng = np.random.default_rng(7)
    arrivals = rng.uniform(0.0, 10.0, 200)
    capacity = rng.uniform(0.0, 10.0, 200)
    backlog, expected = 25.0, []
    for a, c in zip(arrivals, capacity, strict=True):
        backlog = max(backlog + a - c, 0.0)
        expected.append(backlog)
    arrived = 100.0 + np.cumsum(arrivals)  # any origin: 75 processed of the 100 before
    done = processed(75.0, arrived, np.cumsum(capacity))
    assert arrived - done == pytest.approx(expected, abs=1e-9)
