"""Every autoscaling policy on every shipped trace: the table, the ratios, and a plot.

Run: ``.venv/bin/python benchmarks/autoscale.py [--plot PNG] [--jobs 2] [--nyc-days 28]
[--spot-share 1.0]``. Workers run on spot at ``--spot-share`` with the default interruption
rate (``SLUICE_AUTOSCALE_SPOT__*``): the tables show the cost at spot prices next to the same
worker-hours on demand, the interruptions and the tasks they moved. Each table has the rescales
per day and the minutes the fleet stood still (rescale pauses, moved tasks) next to the savings:
a policy that saves by rescaling every few minutes pays for it in pauses and rebalances.
Runs are independent, so they are spread over `--jobs` processes (the MCTS runs first, being the
longest). nyc_taxi spans seven months; it is cut to `--nyc-days` to keep the whole benchmark
within about two minutes on two cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from orchestration.autoscaling.config import AutoscaleSettings  # noqa: E402
from orchestration.autoscaling.policies import POLICIES, make_policy  # noqa: E402
from orchestration.autoscaling.report import plot_results, summary_table  # noqa: E402
from orchestration.autoscaling.simulator import (  # noqa: E402
    SimulationResult,
    Simulator,
    load_trace,
    shipped_traces,
    summarise,
)

RESCALES_PER_DAY_AIM = 24.0  # issue 14: mcts rescales at most once an hour on average


def run_one(job: tuple[str, str, float | None, float]) -> tuple[SimulationResult, float]:
    """One policy on one trace, in a worker process; returns the result and its run time."""
    trace, policy, days, spot_share = job
    settings = AutoscaleSettings().updated(
        simulation={"days": days}, spot={"spot_share": spot_share}
    )
    started = time.perf_counter()
    result = Simulator(load_trace(trace), settings).run(make_policy(policy, settings))
    return result, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", default=str(ROOT / "benchmarks" / "out" / "autoscale.png"))
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--nyc-days", type=float, default=28.0, help="days of nyc_taxi to replay")
    parser.add_argument(
        "--spot-share", type=float, default=1.0, help="share of workers on spot (default 1)"
    )
    args = parser.parse_args(argv)

    console = Console(width=180)
    settings = AutoscaleSettings()
    traces = [p.stem for p in shipped_traces()]
    days = {t: (args.nyc_days if t == "nyc_taxi" else None) for t in traces}
    order = ["mcts"] + [p for p in POLICIES if p != "mcts"]
    jobs = [(t, p, days[t], args.spot_share) for p in order for t in traces]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(run_one, jobs))
    wall = time.perf_counter() - started
    cpu = sum(seconds for _, seconds in done)

    by_trace: dict[str, list[SimulationResult]] = {t: [] for t in traces}
    for result, _ in sorted(done, key=lambda d: list(POLICIES).index(d[0].policy)):
        by_trace[result.trace].append(result)

    s = settings
    console.print(
        f"partitions {s.fleet.partitions}, worker rate {s.fleet.worker_rate:.0f} msg/s, peak "
        f"{s.simulation.peak_rate:.0f} msg/s, SLA {s.simulation.sla_s:.0f} s, decision every "
        f"{s.simulation.step_s:.0f} s, a moved task pauses {s.fleet.move_pause_s:.1f} s + "
        f"{s.fleet.move_pause_per_state_mb_s:.2f} s/MB x {s.fleet.state_mb_per_task:.1f} MB, "
        f"MCTS {s.mcts.samples} expansions, horizon {s.mcts.horizon_s / 3600:.1f} h; "
        f"{args.spot_share:.0%} on spot at ${s.spot.spot_hour_price}/h (on demand "
        f"${s.spot.on_demand_hour_price}/h), {s.spot.interruptions_per_worker_day} interruptions "
        f"per worker-day, {s.spot.task_move_pause_s:.0f} s per task an interruption moves"
    )
    ratios = Table(title="mcts against each policy: worker-hours ratio (other / mcts), SLA min")
    ratios.add_column("trace")
    for name in POLICIES:
        if name != "mcts":
            ratios.add_column(name, justify="right")
    verdicts = []
    for trace, results in by_trace.items():
        summaries = {x.policy: x for x in summarise(results)}
        label = f"{trace}" + (f" (first {days[trace]:.0f} days)" if days[trace] else "")
        console.print(summary_table(list(summaries.values()), title=label))
        mcts = summaries["mcts"]
        row = [trace]
        for name, other in summaries.items():
            if name == "mcts":
                continue
            row.append(
                f"{other.worker_hours / mcts.worker_hours:.2f}x, "
                f"{other.sla_violation_minutes:.0f} vs {mcts.sla_violation_minutes:.0f}"
            )
            if name != "static":
                verdicts.append(
                    mcts.worker_hours < other.worker_hours
                    and mcts.sla_violation_minutes <= other.sla_violation_minutes
                )
        verdicts.append(summaries["static"].worker_hours / mcts.worker_hours >= 1.5)
        verdicts.append(mcts.sla_violation_minutes == 0 and mcts.decision_p99_ms < 1000)
        verdicts.append(mcts.rescales_per_day <= RESCALES_PER_DAY_AIM)
        ratios.add_row(*row)
    console.print(ratios)
    console.print(
        "mcts rescales per day (aim <= 24) and pause minutes: "
        + "; ".join(
            f"{trace} {x.rescales_per_day:.1f}/day, {x.pause_minutes:,.0f} min"
            for trace, results in by_trace.items()
            for x in summarise(results)
            if x.policy == "mcts"
        )
    )
    console.print(
        f"aims met: {sum(verdicts)}/{len(verdicts)}; wall {wall:.0f} s on {args.jobs} processes "
        f"(sum of run times {cpu:.0f} s)"
    )
    path = plot_results(by_trace, args.plot, settings.simulation.sla_s)
    console.print(f"plot: {path}")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
