"""`sluice stream --views FILE --agents N`: run N local agents over a topic, supervised.

The agents are the same `sluice agent` processes that run on other machines: they register in
the control store, elect a coordinator and share the topic's tasks through the job model.
"""

from __future__ import annotations

import argparse
import signal
import threading

from rich.console import Console

from orchestration.fleet import Supervisor, describe_assignments, start_fleet
from orchestration.runtime import Runtime

__all__ = ["add_agents_argument", "register", "run"]


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
    console = Console()
    fleet = start_fleet(runtime, args.agents, args.views, args.topic)
    console.print(
        f"{len(fleet.agents)} agents ({', '.join(fleet.agents)}); "
        f"logs in {runtime.settings.resolved_state_dir / 'logs'}; `sluice status` shows them; "
        "Ctrl-C stops"
    )
    topic = args.topic or runtime.settings.topic
    shown = [""]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    supervisor = Supervisor(runtime, fleet, args.topic)

    def show(events: list[str], _lags) -> None:
        for event in events:
            console.print(event)
        job_model = describe_assignments(runtime.control.jobs.assignments(topic))
        if job_model != shown[0]:
            shown[0] = job_model
            console.print(f"job model: {job_model}")

    try:
        supervisor.run(stop, 1.0, show)
    except KeyboardInterrupt:
        pass
    finally:
        console.print("stopping agents (each checkpoints and releases its tasks first)...")
        fleet.stop()
    return 0
