"""The simulator's cost with spot: prices, injected interruptions (a recorded list or a rate)
and what they do to processing, worked out by hand."""

from __future__ import annotations

import pytest
from autoscale_builders import trace_of

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.policies import StaticPolicy
from orchestration.control_plane.autoscaling.simulator import Simulator


def _settings(settings: AutoscaleSettings, **spot) -> AutoscaleSettings:
    return settings.updated(
        fleet={"partitions": 20, "worker_rate": 1000.0},
        simulation={"peak_rate": 10000.0, "step_s": 300.0, "tick_s": 10.0, "sla_s": 600.0},
        spot=spot,
    )


def test_on_demand_costs_its_price_and_is_never_interrupted(settings) -> None:
    s = _settings(settings, spot_share=0.0, interruptions_per_worker_day=100.0)
    summary = Simulator(trace_of([1.0] * 289), s).run(StaticPolicy.from_settings(s)).summary()
    assert summary.worker_hours == pytest.approx(240.0)
    assert summary.cost_dollars == pytest.approx(240.0 * 0.192)
    assert summary.on_demand_cost_dollars == summary.cost_dollars
    assert (summary.interruptions, summary.tasks_moved) == (0, 0)


def test_recorded_interruptions_move_tasks_and_cost_processing(settings) -> None:
    # 10 workers exactly carry 10000 msg/s; each interruption moves 2 tasks that pause 15 s
    times = [1000.0, 1100.0, 5000.0]
    s = _settings(settings, spot_share=1.0, interruption_times_s=times, task_move_pause_s=15.0)
    result = Simulator(trace_of([1.0] * 289), s).run(StaticPolicy.from_settings(s))
    summary = result.summary()
    assert (summary.interruptions, summary.tasks_moved) == (3, 6)
    assert summary.cost_dollars == pytest.approx(240.0 * 0.0768)
    assert summary.on_demand_cost_dollars == pytest.approx(240.0 * 0.192)
    # two interruptions in the step [900, 1200): 2 x 15 s / 10 workers = 3 s of the fleet lost,
    # 30,000 messages behind, and a fleet at capacity never catches up
    hit = next(r for r in result.records if r.time == 1200.0)
    assert hit.interruptions == 2
    assert hit.backlog == pytest.approx(30_000.0, rel=0.05)
    assert result.records[-1].backlog == pytest.approx(45_000.0, rel=0.05)


def test_rate_driven_interruptions_are_seeded_and_near_their_expectation(settings) -> None:
    s = _settings(settings, spot_share=1.0, interruptions_per_worker_day=2.0, seed=7)
    sim = Simulator(trace_of([1.0] * (289 * 7)), s)  # 7 days of 10 workers: 140 expected
    first = sim.run(StaticPolicy.from_settings(s)).summary()
    again = sim.run(StaticPolicy.from_settings(s)).summary()
    assert first.interruptions == again.interruptions  # same seed, same interruptions
    assert abs(first.interruptions - 140) < 4 * 140**0.5
    assert first.tasks_moved == 2 * first.interruptions
