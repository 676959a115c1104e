"""A perfect forecast for the benchmark: the replayed trace's own future rates.

Not a planner's default and not reachable live: it exists to split the planner's gap to the
offline optimum into what the forecast costs (the planner given the truth against the planner
given its forecaster) and what the search and its prices cost (the planner given the truth
against the optimum). It answers the forecaster's question, the mean input rate of each of the
next steps, from the simulator's cumulative arrivals, so it is exact on the simulator's tick
grid.
"""

from __future__ import annotations

import numpy as np

__all__ = ["OracleForecaster"]


class OracleForecaster:
    """Mean input rates of the next steps, read from the arrivals the replay will produce."""

    def __init__(self, t: np.ndarray, arrived: np.ndarray) -> None:
        """``t`` are tick times (s, ascending) and ``arrived`` the messages arrived by each."""
        self.t = np.asarray(t, dtype=float)
        self.arrived = np.asarray(arrived, dtype=float)
        span = self.t[-1] - self.t[0]
        # past the trace's end the last tick's rate holds (the replay stops there anyway)
        self.tail_rate = (
            (self.arrived[-1] - self.arrived[-2]) / (self.t[-1] - self.t[-2])
            if self.t.size > 1 and span > 0
            else 0.0
        )

    def cumulative(self, at: np.ndarray) -> np.ndarray:
        """Messages arrived by each time in ``at``."""
        inside = np.interp(at, self.t, self.arrived)
        past = np.maximum(at - self.t[-1], 0.0)
        return inside + past * self.tail_rate

    def forecast(
        self, times: np.ndarray, rates: np.ndarray, now: float, step_s: float, steps: int
    ) -> np.ndarray:
        """The true mean rate of each of the ``steps`` steps of ``step_s`` after ``now`` (the
        history arguments are the forecaster's interface, and ignored)."""
        edges = now + np.arange(steps + 1) * step_s
        return np.diff(self.cumulative(edges)) / step_s
