"""The benchmark's perfect forecast: the replay's own future rates, step by step."""

from __future__ import annotations

import numpy as np
from autoscale_builders import trace_of

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.evaluation.oracle import OracleForecaster
from orchestration.control_plane.autoscaling.policies import MctsPolicy
from orchestration.control_plane.autoscaling.simulator import Simulator


def test_the_oracle_forecasts_the_rates_the_replay_then_measures(
    settings: AutoscaleSettings,
) -> None:
    rates = [1.0, 1.0, 4.0, 9.0, 2.0, 2.0, 7.0, 3.0, 3.0, 1.0]
    sim = Simulator(trace_of(rates), settings.updated(spot={"spot_share": 0.0}))
    oracle = OracleForecaster(sim.t, sim.arrived)
    empty = np.array([])
    run = sim.run(MctsPolicy(settings))
    measured = np.array([r.input_rate for r in run.records])  # each step's true mean rate
    for k in (0, 3, 6):
        now = k * sim.step_s
        ahead = oracle.forecast(empty, empty, now, sim.step_s, 3)
        assert np.allclose(ahead, measured[k : k + 3], rtol=1e-9)


def test_past_the_trace_the_last_rate_holds() -> None:
    t = np.array([0.0, 10.0, 20.0])
    arrived = np.array([0.0, 100.0, 300.0])  # 10 msg/s, then 20
    oracle = OracleForecaster(t, arrived)
    assert np.allclose(oracle.forecast(t, arrived, 10.0, 10.0, 3), [20.0, 20.0, 20.0])
    assert np.allclose(oracle.forecast(t, arrived, 0.0, 5.0, 2), [10.0, 10.0])
