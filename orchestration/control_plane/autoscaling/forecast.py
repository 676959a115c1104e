"""Traffic forecast for the planner: yesterday's shape, moved to today's level, plus trend.

Metamarkets listed a forecast as future work: without one the planner only reacts, so it must
keep spare workers for a ramp it cannot see. With one it can scale up just before the daily
ramp and down right after it. The forecast is deliberately simple and cheap (it runs on every
decision): the last season's profile, smoothed so a one-off spike yesterday is not
replayed today, shifted by how far today's level is from yesterday's at the same time, and
blended towards the current level at short lead times. Without a full season of history it
falls back to the current level plus a damped linear trend.

What the season does not explain is noise: where the season earns little trust (news-driven
bursts), the current rate and level are read as the mean of the last `noise_window_s`, so the
planner sizes the fleet for what the traffic does over hours rather than for its last five
minutes, and does not rescale up and down with every burst (the burst itself is in the measured
backlog, which the planner drains).
"""

from __future__ import annotations

import math

import numpy as np

from orchestration.control_plane.autoscaling.config import ForecastSettings

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

    @classmethod
    def _persistence(
        cls, times: np.ndarray, rates: np.ndarray, lo: float, hi: float
    ) -> tuple[float, float]:
        """(lag-one autocorrelation in [0, 1], centre at `hi`) of the rates in (lo, hi]
        around their shape (a step, a line where noise could not have drawn it, else their
        mean): about 1 for a smooth curve, about 0 for noise around a level."""
        mask = (times > lo) & (times <= hi)
        t, x = times[mask] - hi, rates[mask]
        if x.size < 4:
            return 1.0, float(rates[-1])
        fitted, centre = cls._shape(t, x)
        d = x - fitted
        var = float(np.dot(d, d))
        rho = (
            float(np.dot(d[1:], d[:-1])) / var
            if var > 1e-9 * max(float(np.dot(x, x)), 1.0)
            else 1.0
        )
        return min(max(rho, 0.0), 1.0), centre

    @classmethod
    def _shape(cls, t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """The rates' shape at ``t`` and its value at t = 0: their mean, unless noise could not
        have drawn a line through them; then the line, or a step (one level, then another)
        where one explains them at least as well. A step read as a line would be
        extrapolated past the new level."""
        mean = float(y.mean())
        slope = cls._significant_slope(t, y)
        if slope == 0.0:
            return np.full(y.size, mean), mean
        line = mean + slope * (t - t.mean())
        step = cls._step_fit(y)
        if step is not None and float(np.sum((y - step) ** 2)) <= float(np.sum((y - line) ** 2)):
            return step, float(step[-1])
        return line, mean - slope * float(t.mean())

    @staticmethod
    def _significant_slope(t: np.ndarray, y: np.ndarray) -> float:
        """The least-squares slope, or 0 where noise alone could have drawn it (within three
        standard errors): a trend fitted to noise would move the forecast by the noise."""
        if t.size < 3:
            return 0.0
        slope, intercept = np.polyfit(t, y, 1)
        resid = y - (slope * t + intercept)
        spread = float(np.sum((t - t.mean()) ** 2))
        if spread <= 0:
            return 0.0
        se = math.sqrt(float(np.dot(resid, resid)) / max(t.size - 2, 1) / spread)
        return float(slope) if abs(slope) > 3.0 * se else 0.0

    @staticmethod
    def _step_fit(y: np.ndarray) -> np.ndarray | None:
        """The best fit of one level up to a break and another after it (at least two points
        each side), by least squares; None with fewer than four points."""
        n = y.size
        if n < 4:
            return None
        c1 = np.cumsum(y)
        c2 = np.cumsum(y * y)
        i = np.arange(2, n - 1)  # points before the break
        left = c2[i - 1] - c1[i - 1] ** 2 / i
        right = (c2[-1] - c2[i - 1]) - (c1[-1] - c1[i - 1]) ** 2 / (n - i)
        k = int(i[np.argmin(left + right)])
        out = np.empty(n)
        out[:k] = c1[k - 1] / k
        out[k:] = (c1[-1] - c1[k - 1]) / (n - k)
        return out

    @classmethod
    def _trend_slope(cls, t: np.ndarray, y: np.ndarray) -> float:
        """The slope to extrapolate: 0 where a step or noise explains the rates as well."""
        slope = cls._significant_slope(t, y)
        if slope == 0.0:
            return 0.0
        step = cls._step_fit(y)
        line = y.mean() + slope * (t - t.mean())
        if step is not None and float(np.sum((y - step) ** 2)) <= float(np.sum((y - line) ** 2)):
            return 0.0  # a step, not a ramp
        return slope

    @staticmethod
    def _window(
        times: np.ndarray, rates: np.ndarray, lo: float, hi: float, reduce=np.median
    ) -> float:
        """``reduce`` of the rates in (lo, hi]; the rate interpolated at ``hi`` if none."""
        mask = (times > lo) & (times <= hi)
        if not mask.any():
            return float(np.interp(hi, times, rates))
        return float(reduce(rates[mask]))

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
        level = self._window(times, rates, now - s.level_window_s, now)
        weight = np.exp(-lead / s.persistence_tau_s)
        season = s.season_s
        if times[0] <= now - season + step_s:
            trust = self.season_trust(times, rates, now)
            if s.noise_window_s > 0:
                # what the season does not explain is noise: read the present as its mean
                calm = self._window(times, rates, now - s.noise_window_s, now, np.mean)
                last = trust * last + (1 - trust) * calm
                level = trust * level + (1 - trust) * calm
            half = s.smoothing_s / 2
            offsets = np.linspace(-half, half, 7) if half > 0 else np.zeros(1)
            grid = (ends - season)[:, None] + offsets[None, :]
            profile = np.median(np.interp(grid, times, rates), axis=1)
            then = self._window(times, rates, now - season - s.level_window_s, now - season)
            seasonal = profile + (level - then)
            out = weight * last + (1 - weight) * (trust * seasonal + (1 - trust) * level)
        else:
            rho = 1.0
            if s.noise_window_s > 0:
                # no season to tell noise from news: the next rate of an AR(1) process is the
                # mean plus the lag-one autocorrelation times the last deviation from it, and
                # a slope drawn through noise is worth as little
                rho, calm = self._persistence(times, rates, now - s.noise_window_s, now)
                last = calm + rho * (last - calm)
                level = calm + rho * (level - calm)
            recent = times > now - s.trend_window_s
            slope = rho * self._trend_slope(times[recent] - now, rates[recent])
            # damped trend from the level: the slope fades out over the persistence time
            damped = s.persistence_tau_s * (1 - np.exp(-lead / s.persistence_tau_s))
            out = weight * last + (1 - weight) * level + slope * damped
        return np.maximum(out, 0.0)
