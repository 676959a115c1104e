"""benchmarks/forecast_error.py scores the forecaster on what the planner really sees."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from benchmarks import forecast_error
from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.simulator import Simulator, Trace


class Recorder:
    """Holds the count and keeps every snapshot the simulator shows a policy."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[FleetMetrics] = []

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        self.seen.append(metrics)
        return ScalingDecision(metrics.workers, "hold", self.name, current=metrics.workers)


def trace(days: float) -> Trace:
    t = np.arange(0, days * 86400.0, 300.0)
    return Trace("daily", t, 1000.0 + 800.0 * np.sin(2 * np.pi * t / 86400.0))


def test_the_rates_scored_are_the_rates_the_policy_is_shown() -> None:
    settings = AutoscaleSettings().updated(spot={"spot_share": 0.0})
    sim = Simulator(trace(0.5), settings)
    recorder = Recorder()
    sim.run(recorder)
    times, rates = forecast_error.measured_rates(sim)
    assert np.allclose(times, [m.time for m in recorder.seen])
    assert np.allclose(rates, [m.input_rate for m in recorder.seen])


def test_a_repeating_day_is_forecast_better_than_persistence_at_an_hour() -> None:
    settings = AutoscaleSettings().updated(spot={"spot_share": 0.0})
    errors = forecast_error.forecast_errors(Simulator(trace(3), settings), settings)
    live, persistence = errors["live 60 min"], errors["persistence 60 min"]
    assert live["rel_abs_error"] < 0.5 * persistence["rel_abs_error"]
    assert abs(live["bias"]) < 0.02
