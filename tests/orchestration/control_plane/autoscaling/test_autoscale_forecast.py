from __future__ import annotations

import numpy as np

from orchestration.control_plane.autoscaling.config import ForecastSettings
from orchestration.control_plane.autoscaling.forecast import SeasonalTrendForecaster

DAY = 86400.0
STEP = 300.0


def daily(t: np.ndarray) -> np.ndarray:
    return 10000.0 + 8000.0 * np.sin(2 * np.pi * t / DAY)


def test_daily_pattern_is_forecast_from_yesterday() -> None:
    times = np.arange(0, 2 * DAY, STEP)
    now = float(times[-1])
    future = SeasonalTrendForecaster().forecast(times, daily(times), now, STEP, 24)
    truth = daily(now + (np.arange(24) + 1) * STEP)
    assert np.max(np.abs(future - truth)) < 0.05 * truth.max()


def test_level_shift_moves_the_profile() -> None:
    times = np.arange(0, 2 * DAY, STEP)
    rates = daily(times) + np.where(times >= 1.75 * DAY, 3000.0, 0.0)
    now = float(times[-1])
    future = SeasonalTrendForecaster().forecast(times, rates, now, STEP, 24)
    truth = daily(now + (np.arange(24) + 1) * STEP) + 3000.0
    assert np.max(np.abs(future - truth)) < 0.05 * truth.max()


def test_yesterdays_burst_is_not_replayed_when_the_season_has_no_skill() -> None:
    rng = np.random.default_rng(1)
    times = np.arange(0, 2 * DAY, STEP)
    rates = 1000.0 + rng.gamma(1.0, 300.0, times.size)
    burst_at = float(times[-1]) - DAY + 3600.0
    rates[(times > burst_at) & (times < burst_at + 1800)] = 30000.0
    forecaster = SeasonalTrendForecaster()
    assert forecaster.season_trust(times, rates, float(times[-1])) < 0.4
    future = forecaster.forecast(times, rates, float(times[-1]), STEP, 24)
    assert future.max() < 0.4 * 30000.0


def test_short_history_uses_level_and_trend_and_never_goes_negative() -> None:
    times = np.arange(0, 7200, STEP)
    rates = 5000.0 - 0.5 * times  # falling fast
    future = SeasonalTrendForecaster().forecast(times, rates, float(times[-1]), STEP, 24)
    assert np.all(future >= 0)
    assert future[0] < rates[-1]


def test_nan_history_is_ignored() -> None:
    times = np.arange(0, 3600, STEP)
    rates = np.full(times.size, 2000.0)
    rates[3] = np.nan
    future = SeasonalTrendForecaster().forecast(times, rates, float(times[-1]), STEP, 6)
    assert np.allclose(future, 2000.0)


def test_a_step_is_a_new_level_not_a_trend_to_extrapolate() -> None:
    # the live closed-loop test's traffic: 60 msg/s, then a step to 700 (2 s snapshots)
    settings = ForecastSettings(
        level_window_s=15.0, trend_window_s=60.0, noise_window_s=120.0, persistence_tau_s=30.0
    )
    forecaster = SeasonalTrendForecaster(settings)
    rng = np.random.default_rng(3)
    for after in (4, 8, 15, 30):
        times = np.arange(0.0, 120.0, 2.0)
        rates = np.where(times >= times[-1] - 2.0 * after, 700.0, 60.0)
        rates = rates * (1.0 + 0.03 * rng.standard_normal(times.size))
        future = forecaster.forecast(times, rates, float(times[-1]), 5.0, 24)
        assert np.all(future < 770.0), (after, future.max())
        assert np.all(future > 560.0), (after, future.min())


def test_a_ramp_is_still_a_trend() -> None:
    times = np.arange(0, 3600.0, STEP)
    rates = 1000.0 + 1.0 * times  # +1 msg/s every second, for an hour
    future = SeasonalTrendForecaster().forecast(times, rates, float(times[-1]), STEP, 6)
    assert future[-1] > rates[-1] + 300.0
