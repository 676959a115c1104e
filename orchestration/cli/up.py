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

from orchestration.cli.logs import stderr_console
from orchestration.cli.status import job_view, render
from orchestration.cli.stream import add_agents_argument
from orchestration.fleet import Supervisor, child_environment, start_fleet
from orchestration.fleet.processes import start_process, stop_process
from orchestration.lag import LagTracker
from orchestration.runtime import Runtime
from pipelines.config import SluiceSettings
from pipelines.generator.progress import ReplayProgress
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


def _generator(
    args: argparse.Namespace, env: dict[str, str], state_dir: Path, progress_file: Path
) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "orchestration.cli", "generate", "--trace", args.trace]
    cmd += ["--progress", str(progress_file)]
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


PROGRESS_FILE = "replay-progress.json"


def run(args: argparse.Namespace) -> int:
    base = Runtime.from_env()
    settings = up_settings(base.settings, args.flush_interval)
    runtime = Runtime(settings, base.kafka)
    state_dir = settings.resolved_state_dir
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    progress_file = state_dir / PROGRESS_FILE
    progress_file.unlink(missing_ok=True)
    console = stderr_console()
    own_broker = None
    fleet = None
    generator = None
    dagster = None
    watch = None
    interrupted = False
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if runtime.kafka.bootstrap_servers:
            bootstrap = runtime.kafka.bootstrap_servers
            console.print(f"using the Kafka cluster at {bootstrap}")
        else:
            broker = EmbeddedBroker(state_dir)
            running = broker.info()
            if running is not None:  # someone else's (sluice broker start): use it, leave it
                info = running
                console.print(
                    f"using the running embedded broker pid {info.pid} at {info.bootstrap}"
                )
            else:
                info = broker.start()
                own_broker = broker
                console.print(f"embedded broker pid {info.pid} at {info.bootstrap}")
            bootstrap = info.bootstrap
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
        generator = _generator(args, {**os.environ, **children}, state_dir, progress_file)
        console.print(
            f"replaying {args.trace} ({args.duration} simulated at {args.speedup:g}x); "
            f"logs in {state_dir / 'logs'}; Ctrl-C stops everything"
        )
        watch = Watch(runtime, generator, dagster, progress_file, args.trace)
        Supervisor(runtime, fleet).run(
            stop,
            2.0,
            lambda events, lags: watch.show(events, lags, args.exit_when_done),
            with_lags=True,
        )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # A second Ctrl-C must not cut the clean-up short and leave children behind.
        previous = signal.signal(signal.SIGINT, _still_stopping(console))
        if watch is not None:
            watch.close()
        try:
            console.print("stopping: generator, agents (checkpointing), Dagster, broker...")
            stop_process(generator)
            if fleet is not None:
                fleet.stop()
            if dagster is not None:
                dagster.stop()
            if own_broker is not None:
                own_broker.stop()
            console.print("stopped")
        finally:
            signal.signal(signal.SIGINT, previous)
    return 130 if interrupted else 0


def _still_stopping(console):
    def handler(_signum, _frame) -> None:
        console.print("still stopping every process started here; a moment...")

    return handler


def _start_dagster(settings: SluiceSettings, env: dict[str, str], console: Console):
    try:
        from orchestration.dagster_service import start_dagster
    except ImportError as exc:
        console.print(f"[yellow]Dagster is not available ({exc}); continuing without it[/]")
        return None
    handle = start_dagster(settings, extra_env=env)
    console.print(f"Dagster UI: [bold]{handle.url}[/]")
    return handle


class Watch:
    """The live panel: the replay's progress, the fleet, Dagster; and the line that says done."""

    def __init__(self, runtime, generator, dagster, progress_file: Path, trace: str) -> None:
        self.runtime = runtime
        self.generator = generator
        self.dagster = dagster
        self.progress_file = progress_file
        self.trace = trace
        self.tracker = LagTracker()
        self.console = stderr_console()
        self.live = Live(console=self.console, auto_refresh=False, transient=False)
        self.started = False
        self.done_at: float | None = None

    def show(self, events: list[str], lags: list, exit_when_done: bool) -> bool:
        """Refresh the panel; True once ``exit_when_done`` and everything is done."""
        if not self.started:
            self.live.start()
            self.started = True
        for event in events:
            self.console.print(event)
        progress = ReplayProgress.read(self.progress_file)
        table = render(lags, self.tracker.update(lags), job_view(self.runtime), self.console.width)
        self.live.update(Group(self.replay_line(progress), self.links(), table), refresh=True)
        finished = self.generator.poll() is not None
        caught_up = bool(lags) and all(lag.backlog == 0 for lag in lags)
        if finished and caught_up and self.done_at is None:
            self.done_at = time.monotonic()
            produced = f"{progress.produced:,} messages" if progress else "the replay"
            self.console.print(
                f"[bold green]done:[/] replayed {produced} and the fleet caught up "
                f"(backlog 0 on all {len(lags)} tasks)",
                highlight=False,
            )
        if finished and self.generator.returncode not in (0, None) and self.done_at is None:
            self.done_at = time.monotonic()
            self.console.print(
                f"[bold red]the generator failed (exit {self.generator.returncode}); see "
                f"{self.runtime.settings.resolved_state_dir / 'logs' / 'generator.log'}[/]"
            )
            return exit_when_done
        if not (exit_when_done and self.done_at is not None):
            return False
        # one more flush interval so the last windows are in the segments
        return time.monotonic() - self.done_at > self.runtime.settings.flush_interval_s + 2

    def close(self) -> None:
        if self.started:
            self.live.stop()
            self.started = False

    def replay_line(self, progress: ReplayProgress | None) -> Text:
        line = Text("replay  ", style="bold")
        if progress is None:
            return line.append(f"{self.trace}: starting")
        hours = f"{progress.sim_s / 3600:,.1f} h of {progress.total_sim_s / 3600:,.1f} h simulated"
        line.append(f"{self.trace}: {hours}  {progress.produced:,} msgs  {progress.rate:,.0f}/s")
        if progress.done:
            line.append("  done", style="green")
        elif progress.eta_s is not None:
            line.append(f"  ETA {_duration(progress.eta_s)}")
        return line

    def links(self) -> Text:
        line = Text("dagster ", style="bold")
        if self.dagster is None:
            return line.append("not started (--no-dagster)", style="dim")
        return line.append(self.dagster.url)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
