"""`sluice stream --views FILE --agents N`: run N local agents over a topic, supervised.

The agents are the same `sluice agent` processes that run on other machines: they register in
the control store, elect a coordinator and share the topic's tasks through the job model.
"""

from __future__ import annotations

import argparse
import threading

from rich.console import Console

from orchestration.control_plane.fleet import (
    LocalFleet,
    Supervisor,
    describe_assignments,
    start_fleet,
)
from orchestration.control_plane.runtime import Runtime
from pipelines.stopping import StopDeadline, on_stop_signals, run_until_stopped

__all__ = ["STOP_MARGIN_S", "add_agents_argument", "register", "run"]

STOP_MARGIN_S = 3.0
"""A supervisor's stop deadline over its agents' (SLUICE_STOP_TIMEOUT_S): it SIGKILLs the
agents 1 s after theirs, and gives up itself 2 s later."""


def add_agents_argument(parser: argparse.ArgumentParser) -> None:
    """``--agents N`` (``--workers`` is its old name): local agents, default 2."""
    parser.add_argument(
        "--agents",
        "--workers",
        dest="agents",
        type=int,
        default=2,
        help="agent processes on this machine (default 2); --workers is the old name",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stream", help="run N local agents over the events topic")
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    add_agents_argument(parser)
    parser.add_argument("--topic", default=None, help="default: SLUICE_TOPIC (events)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    settings = runtime.settings
    console = Console()
    topic = args.topic or settings.topic
    stop = threading.Event()
    fleets: list[LocalFleet] = []
    # the agents get SLUICE_STOP_TIMEOUT_S, then SIGKILL; this process a little more
    deadline = StopDeadline(
        settings.stop_timeout_s + STOP_MARGIN_S,
        "sluice stream",
        last_step=lambda: [fleet.kill() for fleet in fleets],
    )
    on_stop_signals(stop, deadline)

    def supervise() -> None:
        fleet = start_fleet(runtime, args.agents, args.views, args.topic, fleets.append)
        console.print(
            f"{len(fleet.agents)} agents ({', '.join(fleet.agents)}); "
            f"logs in {settings.resolved_state_dir / 'logs'}; `sluice status` shows them; "
            "Ctrl-C stops"
        )
        shown = [""]

        def show(events: list[str], _lags) -> None:
            for event in events:
                console.print(event)
            job_model = describe_assignments(runtime.control.jobs.assignments(topic))
            if job_model != shown[0]:
                shown[0] = job_model
                console.print(f"job model: {job_model}")

        Supervisor(runtime, fleet, args.topic).run(stop, 1.0, show)

    try:
        # the supervisor calls the broker and the control store; the main thread only waits,
        # so a signal is taken at once however long those calls take
        run_until_stopped(supervise, stop, "supervisor")
    finally:
        deadline.arm()
        for fleet in fleets:
            console.print("stopping agents (each checkpoints and releases its tasks first)...")
            fleet.close(settings.stop_timeout_s + 1)
    return 0
