"""Traffic forecast for the planner: yesterday's shape, moved to today's level, plus trend.

Metamarkets listed a forecast as future work: without one the planner only reacts, so it must
keep spare workers for a ramp it cannot see. With one it can scale up just before the daily
ramp and down right after it. The forecast is deliberately simple and cheap (it runs on every
decision): the last season's profile, smoothed so a one-off spike yesterday is not
replayed today, shifted by how far today's level is from yesterday's at the same time, and
blended towards the current level at short lead times. Without a full season of history it
falls back to the current level plus a damped linear trend.
"""

from __future__ import annotations

import math

import numpy as np

from orchestration.autoscaling.config import ForecastSettings

__all__ = ["SeasonalTrendForecaster"]


class SeasonalTrendForecaster:
    """Forecasts mean input rates for the next steps from (time, rate) history."""

    def __init__(self, settings: ForecastSettings | None = None) -> None:
        self.settings = settings or ForecastSettings()

    def season_trust(self, times: np.ndarray, rates: np.ndarray, now: float) -> float:
        """How far to trust last season's shape, 0..1, from its recent skill.

        Over the last `skill_window_s`, compare last season's value (moved to the window's
        level) with the level `skill_lead_s` earlier; weight by the squared ratio of their
        mean squared errors, so a season no better than the level gets little weight.
        Traffic with a daily rhythm (taxi rides) earns trust; news-driven bursts (tweets) do
        not, and the planner then plans from the current level.
        """
        s = self.settings
        t = times[(times > now - s.skill_window_s) & (times - s.season_s >= times[0])]
        t = t[t - s.skill_lead_s - s.season_s - s.level_window_s >= times[0]]
        if t.size < 4:
            return 1.0
        actual = np.interp(t, times, rates)
        back = t - s.skill_lead_s

        def level(at: np.ndarray) -> np.ndarray:
            return np.mean(
                [np.interp(at - f * s.level_window_s, times, rates) for f in (0.0, 0.5, 1.0)],
                axis=0,
            )

        # what each model would have said `skill_lead_s` ago about time t
        persistent = level(back)
        seasonal = np.interp(t - s.season_s, times, rates) + persistent - level(back - s.season_s)
        e_season = float(np.mean((actual - seasonal) ** 2))
        e_persist = float(np.mean((actual - persistent) ** 2))
        if e_season + e_persist <= 0:
            return 1.0
        return e_persist**2 / (e_season**2 + e_persist**2)

    @staticmethod
    def _window_median(times: np.ndarray, rates: np.ndarray, lo: float, hi: float) -> float:
        mask = (times > lo) & (times <= hi)
        if not mask.any():
            return float(np.interp(hi, times, rates))
        return float(np.median(rates[mask]))

    def forecast(
        self, times: np.ndarray, rates: np.ndarray, now: float, step_s: float, steps: int
    ) -> np.ndarray:
        """Mean input rate (msg/s) of each of the next `steps` steps of `step_s` after `now`.

        `times` are ascending measurement times (s) and `rates` the mean rate of the window
        ending at each; NaN entries are ignored. The result is never negative. Medians, not
        means, make the level and last season's profile: a five-minute burst is news, not a
        pattern, and must not be replayed tomorrow nor held for the next half hour.
        """
        ok = np.isfinite(times) & np.isfinite(rates)
        times, rates = times[ok], rates[ok]
        if times.size == 0:
            return np.full(steps, math.nan)
        s = self.settings
        lead = (np.arange(steps) + 1) * step_s
        ends = now + lead
        last = float(rates[-1])
        level = self._window_median(times, rates, now - s.level_window_s, now)
        weight = np.exp(-lead / s.persistence_tau_s)
        season = s.season_s
        if times[0] <= now - season + step_s:
            half = s.smoothing_s / 2
            offsets = np.linspace(-half, half, 7) if half > 0 else np.zeros(1)
            grid = (ends - season)[:, None] + offsets[None, :]
            profile = np.median(np.interp(grid, times, rates), axis=1)
            then = self._window_median(times, rates, now - season - s.level_window_s, now - season)
            seasonal = profile + (level - then)
            trust = self.season_trust(times, rates, now)
            out = weight * last + (1 - weight) * (trust * seasonal + (1 - trust) * level)
        else:
            recent = times > now - s.trend_window_s
            slope = 0.0
            if recent.sum() >= 3:
                slope = float(np.polyfit(times[recent] - now, rates[recent], 1)[0])
            # damped trend from the level: the slope fades out over the persistence time
            damped = s.persistence_tau_s * (1 - np.exp(-lead / s.persistence_tau_s))
            out = weight * last + (1 - weight) * level + slope * damped
        return np.maximum(out, 0.0)
