"""`sluice up`: the main job on one machine, started and stopped as one.

Starts the embedded broker (unless KAFKA_BOOTSTRAP_SERVERS points elsewhere), the stream
agents over the example views, the generator replaying a shipped trace (a simulated day in
a few minutes) and the Dagster webserver and daemon; shows progress; Ctrl-C stops every
process it started, agents first so they checkpoint.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from orchestration.cli.status import StatusTracker, job_view, render
from orchestration.cli.stream import add_agents_argument
from orchestration.fleet import Supervisor, child_environment, start_fleet
from orchestration.fleet.processes import start_process, stop_process
from orchestration.runtime import Runtime
from pipelines.config import SluiceSettings
from pipelines.kafka import EmbeddedBroker, ensure_topics

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("up", help="run everything: broker, agents, generator, Dagster")
    add_agents_argument(parser)
    parser.add_argument("--views", default=None, help="view definitions (default: the examples)")
    parser.add_argument("--trace", default="nyc_taxi", help="shipped trace or CSV")
    parser.add_argument("--duration", default="1d", help="simulated time to replay (default 1d)")
    parser.add_argument("--speedup", type=float, default=480.0, help="simulated s per wall s")
    parser.add_argument("--peak-rate", type=float, default=3000.0, help="msg/s at the trace peak")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=None,
        help="segment flush seconds (default: SLUICE_FLUSH_INTERVAL_S if set, else 5 here, "
        "so a compressed day shows up quickly)",
    )
    parser.add_argument("--no-dagster", action="store_true", help="do not start Dagster")
    parser.add_argument(
        "--exit-when-done",
        action="store_true",
        help="stop once the replay is over and the agents have caught up",
    )
    parser.set_defaults(func=run)


def _generator(args: argparse.Namespace, env: dict[str, str], state_dir: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "orchestration.cli", "generate", "--trace", args.trace]
    cmd += ["--duration", args.duration, "--speedup", str(args.speedup)]
    cmd += ["--peak-rate", str(args.peak_rate), "--seed", str(args.seed)]
    cmd += ["--report", str(state_dir / "generate-report.json")]
    return start_process(cmd, env, state_dir / "logs" / "generator.log")


UP_DEFAULTS = {
    "flush_interval_s": 5.0,  # a compressed day shows up in the segments quickly
    "checkpoint_interval_s": 15.0,
    "fleet_sample_interval_s": 2.0,  # ~16 event-time minutes at 480x
}
"""What `up` changes from the settings' defaults, unless the user set the option."""


def up_settings(settings: SluiceSettings, flush_interval: float | None) -> SluiceSettings:
    """``settings`` with `up`'s defaults for the options the user left unset; ``--flush-interval``
    wins over everything."""
    update = {k: v for k, v in UP_DEFAULTS.items() if k not in settings.model_fields_set}
    if flush_interval is not None:
        update["flush_interval_s"] = flush_interval
    update["state_dir"] = settings.resolved_state_dir
    return SluiceSettings.model_validate({**settings.model_dump(), **update})


def run(args: argparse.Namespace) -> int:
    base = Runtime.from_env()
    settings = up_settings(base.settings, args.flush_interval)
    runtime = Runtime(settings, base.kafka)
    state_dir = settings.resolved_state_dir
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    console = Console()
    broker = None
    fleet = None
    generator = None
    dagster = None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if runtime.kafka.bootstrap_servers:
            bootstrap = runtime.kafka.bootstrap_servers
            console.print(f"using the Kafka cluster at {bootstrap}")
        else:
            broker = EmbeddedBroker(state_dir)
            info = broker.start()
            bootstrap = info.bootstrap
            console.print(f"embedded broker pid {info.pid} at {bootstrap}")
            kafka = runtime.kafka.model_copy(update={"bootstrap_servers": bootstrap})
            runtime = Runtime(settings, kafka)
        ensure_topics(
            bootstrap,
            {settings.topic: settings.partitions, settings.dead_letter_topic: 1},
            runtime.kafka,
        )
        fleet = start_fleet(runtime, args.agents, args.views, None)
        console.print(f"{len(fleet.agents)} stream agents: {', '.join(fleet.agents)}")
        children = child_environment(runtime)
        if not args.no_dagster:
            dagster = _start_dagster(settings, children, console)
        generator = _generator(args, {**os.environ, **children}, state_dir)
        console.print(
            f"replaying {args.trace} ({args.duration} simulated at {args.speedup:g}x); "
            f"logs in {state_dir / 'logs'}; Ctrl-C stops everything"
        )
        _watch(runtime, fleet, generator, dagster, console, stop, args.exit_when_done)
    except KeyboardInterrupt:
        pass
    finally:
        console.print("stopping: generator, agents (checkpointing), Dagster, broker...")
        stop_process(generator)
        if fleet is not None:
            fleet.stop()
        if dagster is not None:
            dagster.stop()
        if broker is not None:
            broker.stop()
        console.print("stopped")
    return 0


def _start_dagster(settings: SluiceSettings, env: dict[str, str], console: Console):
    try:
        from orchestration.dagster_service import start_dagster
    except ImportError as exc:
        console.print(f"[yellow]Dagster is not available ({exc}); continuing without it[/]")
        return None
    handle = start_dagster(settings, extra_env=env)
    console.print(f"Dagster UI: [bold]{handle.url}[/]")
    return handle


def _watch(runtime, fleet, generator, dagster, console, stop, exit_when_done: bool) -> None:
    caught_up_since = None
    supervisor = Supervisor(runtime, fleet)
    tracker = StatusTracker()
    with Live(console=console, auto_refresh=False) as live:

        def show(events: list[str], lags: list) -> bool:
            nonlocal caught_up_since
            for event in events:
                console.print(event)
            gen_state = (
                "running" if generator.poll() is None else f"done (exit {generator.returncode})"
            )
            header = Text(f"generator: {gen_state}")
            if dagster is not None:
                header.append(f"   Dagster: {dagster.url}")
            live.update(
                Group(header, render(lags, tracker.update(lags), job_view(runtime))), refresh=True
            )
            done = generator.poll() is not None and lags and all(lag.backlog == 0 for lag in lags)
            if not (exit_when_done and done):
                caught_up_since = None
                return False
            caught_up_since = caught_up_since or time.monotonic()
            # one more flush interval so the last windows are in the segments
            return time.monotonic() - caught_up_since > runtime.settings.flush_interval_s + 2

        supervisor.run(stop, 2.0, show, with_lags=True)
