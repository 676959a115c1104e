"""`sluice autoscale`: replay traffic traces against the scaling policies.

`sluice autoscale simulate --trace nyc_taxi --policy all --plot out.png` prints, per policy,
worker-hours, savings against `static`, utilisation, SLA-violation minutes, max lag, rescales
and decision time. Unset flags fall back to ``SLUICE_AUTOSCALE_*`` environment variables.
"""

from __future__ import annotations

import argparse
import logging
import math
import time

from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestration.cli.logs import stderr_console
from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.exceptions import InvalidFleetParameter, UnknownPolicy
from orchestration.control_plane.autoscaling.policies import COMPARED, POLICIES, make_policy
from orchestration.control_plane.autoscaling.report import plot_results, print_table, summaries_json
from orchestration.control_plane.autoscaling.simulator import Simulator, load_trace, summarise

__all__ = ["register", "run_simulate"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `autoscale` and its `simulate` subcommand."""
    parser = subparsers.add_parser(
        "autoscale", help="autoscaling policies: simulate them on traffic traces"
    )
    sub = parser.add_subparsers(dest="autoscale_command", metavar="ACTION")
    sim = sub.add_parser(
        "simulate",
        help="replay a trace (timestamp,value CSV) against one or all policies",
        description="Replay a trace as input rate and report each policy's cost and lag.",
    )
    sim.add_argument(
        "--trace", required=True, help="CSV path or shipped trace name (e.g. nyc_taxi)"
    )
    sim.add_argument(
        "--policy",
        default="all",
        help=f"one of {', '.join(POLICIES)}, or all (default: {', '.join(COMPARED)})",
    )
    sim.add_argument("--partitions", type=int, help="partitions of the input topic")
    sim.add_argument("--peak-rate", type=float, help="msg/s the trace maximum is scaled to")
    sim.add_argument("--worker-rate", type=float, help="msg per busy-second of one worker")
    sim.add_argument("--sla", type=float, help="time-lag SLA, seconds")
    sim.add_argument("--days", type=float, help="replay only the first N days")
    sim.add_argument("--step", type=float, help="decision interval, seconds")
    sim.add_argument("--samples", type=int, help="MCTS tree expansions per decision")
    sim.add_argument("--seed", type=int, help="MCTS seed")
    sim.add_argument("--json", action="store_true", help="print JSON instead of the table")
    sim.add_argument("--plot", metavar="PNG", help="write workers and lag over time to PNG")
    sim.set_defaults(func=run_simulate)

    def _help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=_help)


def _check_positive(name: str, value: float | int | None) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise InvalidFleetParameter(f"{name} must be a positive number, got {value}")


def settings_from_args(args: argparse.Namespace) -> AutoscaleSettings:
    """Environment settings overridden by the flags that were given."""
    for flag in ("partitions", "peak_rate", "worker_rate", "sla", "days", "step", "samples"):
        _check_positive("--" + flag.replace("_", "-"), getattr(args, flag, None))
    try:
        return AutoscaleSettings().updated(
            fleet={"partitions": args.partitions, "worker_rate": args.worker_rate},
            simulation={
                "peak_rate": args.peak_rate,
                "sla_s": args.sla,
                "days": args.days,
                "step_s": args.step,
            },
            mcts={"samples": args.samples, "seed": args.seed},
        )
    except ValidationError as exc:
        raise InvalidFleetParameter(f"invalid autoscaling settings: {exc}") from exc


def run_simulate(args: argparse.Namespace) -> int:
    """Simulate, print the table (or JSON), optionally plot; returns the exit code."""
    settings = settings_from_args(args)
    names = list(COMPARED) if args.policy == "all" else [args.policy]
    for name in names:
        if name not in POLICIES:
            raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(POLICIES)}, all")
    if "static" not in names:
        names.insert(0, "static")  # the baseline every saving is measured against
    trace = load_trace(args.trace)
    sim = Simulator(trace, settings)
    results = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=True,
    ) as progress:
        task = progress.add_task(f"simulating {trace.name}", total=len(names))
        for name in names:
            progress.update(task, description=f"simulating {trace.name}: {name}")
            started = time.perf_counter()
            results.append(sim.run(make_policy(name, settings)))
            logger.debug("%s on %s: %.1f s", name, trace.name, time.perf_counter() - started)
            progress.advance(task)
    summaries = summarise(results)
    if args.json:
        print(
            summaries_json(
                summaries,
                trace=trace.name,
                days=sim.trace.duration_s / 86400.0,
                settings=settings.model_dump(exclude={"aws"}),
            )
        )
    else:
        print_table(summaries, title=f"{trace.name}: {sim.trace.duration_s / 86400:.1f} days")
    if args.plot:
        path = plot_results({trace.name: results}, args.plot, settings.simulation.sla_s)
        if not args.json:
            print(f"plot: {path}")
    return 0
