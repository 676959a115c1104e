"""How far the planner's live forecast is from the truth on every shipped trace.

Run: ``.venv/bin/python benchmarks/forecast_error.py [--traces AAPL,elb] [--nyc-days 28]
[--json PATH]``. At every decision of a replay (the simulator's 5-minute steps), the forecaster
gets the input rates the `mcts` policy would have seen (the simulator's snapshots over the same
span) and forecasts the next plan steps; each forecast is compared with the trace's true mean
rate of the step (`oracle.OracleForecaster`). Per lead time: the absolute error over the mean
rate (sum |forecast - truth| / sum truth), the bias (sum (forecast - truth) / sum truth), and the
mean absolute error in workers (the fewest workers carrying the forecast against those carrying
the truth, the planner's unit); beside it, persistence (the last measured rate) as the
baseline a forecast must beat. Without the planner's `forecast_margin`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from orchestration.control_plane.autoscaling.capacity import workers_for_rate  # noqa: E402
from orchestration.control_plane.autoscaling.config import AutoscaleSettings  # noqa: E402
from orchestration.control_plane.autoscaling.evaluation.oracle import OracleForecaster  # noqa: E402
from orchestration.control_plane.autoscaling.forecast import SeasonalTrendForecaster  # noqa: E402
from orchestration.control_plane.autoscaling.simulator import Simulator, load_trace, shipped_traces  # noqa: E402

LEADS_MIN = (5, 30, 60, 120)


def measured_rates(sim: Simulator) -> tuple[np.ndarray, np.ndarray]:
    """(time, input rate) of the snapshots the simulator gives a policy: the mean rate of the
    step before each decision (the first decision sees the first tick's rate)."""
    ticks = sim.ticks_per_step
    times = np.arange(sim.steps) * sim.step_s
    idx = np.arange(sim.steps) * ticks
    rates = np.empty(sim.steps)
    rates[0] = sim.rate[0]
    rates[1:] = (sim.arrived[idx[1:]] - sim.arrived[idx[1:] - ticks]) / sim.step_s
    return times, rates


def forecast_errors(sim: Simulator, settings: AutoscaleSettings) -> dict[str, dict[str, float]]:
    """Error figures per lead (minutes) of the live forecaster and of persistence."""
    m, f = settings.mcts, settings.forecast
    step = m.plan_step_s
    steps = max(1, math.ceil(m.horizon_s / step))
    span = f.season_s + m.horizon_s + f.smoothing_s + step  # what the policy reads back
    times, rates = measured_rates(sim)
    oracle = OracleForecaster(sim.t, sim.arrived)
    live = SeasonalTrendForecaster(f)
    last_start = sim.steps * sim.step_s - steps * step  # forecasts that end inside the trace
    fc, truth, persist = [], [], []
    for k, now in enumerate(times):
        if now > last_start:
            break
        window = times[: k + 1] >= now - span
        t, r = times[: k + 1][window], rates[: k + 1][window]
        fc.append(live.forecast(t, r, now, step, steps))
        truth.append(oracle.forecast(t, r, now, step, steps))
        persist.append(np.full(steps, r[-1]))
    fleet = settings.fleet

    def workers(x: np.ndarray) -> np.ndarray:
        return np.vectorize(
            lambda v: workers_for_rate(
                v, fleet.partitions, fleet.worker_rate, fleet.upper, fleet.max_bucket_factor
            )
        )(x)

    out: dict[str, dict[str, float]] = {}
    y_all = np.array(truth)
    for name, values in (("live", np.array(fc)), ("persistence", np.array(persist))):
        for lead in LEADS_MIN:
            j = min(steps, max(1, round(lead * 60 / step))) - 1
            y, x = y_all[:, j], values[:, j]
            total = float(y.sum())
            out[f"{name} {lead} min"] = {
                "rel_abs_error": float(np.abs(x - y).sum()) / total,
                "bias": float((x - y).sum()) / total,
                "workers_abs_error": float(np.abs(workers(x) - workers(y)).mean()),
                "under_share": float(np.mean(x < y)),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="all", help="comma-separated parts of trace names")
    parser.add_argument("--nyc-days", type=float, default=28.0, help="days of nyc_taxi")
    parser.add_argument("--json", default="", help="write the figures here")
    args = parser.parse_args(argv)
    console = Console(width=160)
    traces = [p.stem for p in shipped_traces()]
    if args.traces != "all":
        wanted = [w.strip().lower() for w in args.traces.split(",") if w.strip()]
        traces = [t for t in traces if any(w in t.lower() for w in wanted)]
    console.print(f"load average {os.getloadavg()[0]:.1f}")
    figures: dict[str, object] = {}
    for trace in traces:
        days = args.nyc_days if trace == "nyc_taxi" else None
        settings = AutoscaleSettings().updated(simulation={"days": days})
        sim = Simulator(load_trace(trace), settings)
        errors = forecast_errors(sim, settings)
        figures[trace] = errors
        table = Table(title=f"{trace}: forecast against the truth")
        for col in ("forecast, lead", "|error| / rate", "bias", "|error| workers", "under"):
            table.add_column(col, justify="left" if col.startswith("forecast") else "right")
        for name, e in errors.items():
            table.add_row(
                name,
                f"{e['rel_abs_error']:.1%}",
                f"{e['bias']:+.1%}",
                f"{e['workers_abs_error']:.2f}",
                f"{e['under_share']:.0%}",
            )
        console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
