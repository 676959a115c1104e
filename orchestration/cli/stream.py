"""`sluice stream --views FILE --workers N`: run the stream-worker fleet on its own."""

from __future__ import annotations

import argparse
import signal
import threading

from rich.console import Console

from orchestration.fleet import Supervisor, start_fleet
from orchestration.runtime import Runtime

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stream", help="run N stream workers over the events topic")
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--topic", default=None, help="default: SLUICE_TOPIC (events)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    console = Console()
    fleet = start_fleet(runtime, args.workers, args.views, args.topic)
    console.print(
        f"{len(fleet.workers)} workers ({fleet.job_model.describe()}); "
        f"logs in {runtime.settings.resolved_state_dir / 'logs'}; `sluice status` shows them; "
        "Ctrl-C stops"
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    supervisor = Supervisor(runtime, fleet, args.topic)

    def show(events: list[str], _lags) -> None:
        for event in events:
            console.print(event)

    try:
        supervisor.run(stop, 1.0, show)
    except KeyboardInterrupt:
        pass
    finally:
        console.print("stopping workers (each checkpoints first)...")
        fleet.stop()
    return 0
