"""`sluice up`: the main job on one machine, started and stopped as one.

Starts the embedded broker (unless KAFKA_BOOTSTRAP_SERVERS points elsewhere), the stream
agents over the example views (or ``--views FILE``, on the topic its views read), the
generator replaying a shipped trace (a simulated day in a few minutes) or ``--replay EVENTS``,
a file of the topic's own events (:mod:`orchestration.cli.up_source`), and the Dagster
webserver and daemon; shows progress, and each Dagster run as it ends
(:mod:`orchestration.cli.dagster_feed`); Ctrl-C stops every process it started, agents first
so they checkpoint, within ``SLUICE_STOP_TIMEOUT_S`` + 3 s whatever is gone (past it every
child is SIGKILLed by PID).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, SimpleQueue

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

from orchestration.cli.logs import stderr_console
from orchestration.cli.status import job_view, render
from orchestration.cli.stream import STOP_MARGIN_S, add_agents_argument
from orchestration.cli.up_source import (
    file_span,
    hours_span,
    reads_generator_events,
    replay_command,
    topic_declaration,
    up_topic,
)
from orchestration.control_plane.fleet import LocalFleet, Supervisor, child_environment, start_fleet
from orchestration.control_plane.lag import LagTracker
from orchestration.control_plane.processes import start_process, stop_process
from orchestration.control_plane.runtime import Runtime
from orchestration.control_plane.settings import DagsterSettings
from orchestration.control_plane.spark.server import SparkConnectServer
from pipelines.batch.config import SparkSettings
from pipelines.config import SluiceSettings
from pipelines.exceptions import SluiceError
from pipelines.generator.progress import ReplayProgress
from pipelines.kafka import EmbeddedBroker, ensure_topics
from pipelines.settings import load_settings
from pipelines.stopping import StopDeadline, on_stop_signals, run_until_stopped

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("up", help="run everything: broker, agents, generator, Dagster")
    add_agents_argument(parser)
    parser.add_argument(
        "--views",
        default=None,
        help="view definitions (default: the examples); `up` runs on the topic they read",
    )
    parser.add_argument(
        "--replay",
        type=Path,
        default=None,
        metavar="EVENTS",
        help="a JSON Lines (.gz), CSV or Parquet file of that topic's events to replay instead "
        "of the trace, paced at --speedup by its declared event time",
    )
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
        "--no-autoscale",
        action="store_true",
        help="leave the autoscaler sensor off (default: on, scaling the local agents)",
    )
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


UP_DAGSTER_DEFAULTS = {"idle_close_s": 30.0, "automation_interval_s": 10}
"""A replay ends by standing still: `up` closes its last hours after 30 s, not 5 minutes, and
ticks every 10 s, so the day's one correction run starts soon after the replay's end."""


def up_dagster_env() -> dict[str, str]:
    """``SLUICE_*`` for `up`'s Dagster: :data:`UP_DAGSTER_DEFAULTS` where the user set nothing."""
    chosen = load_settings(DagsterSettings).model_fields_set
    return {
        f"SLUICE_{name.upper()}": str(value)
        for name, value in UP_DAGSTER_DEFAULTS.items()
        if name not in chosen
    }


PROGRESS_FILE = "replay-progress.json"


def replay_span(trace: str, duration: str | None) -> tuple[str, str]:
    """The hourly partitions of a replay: from the start of the trace's first day to the end
    of the hour of its last replayed event, as ``SLUICE_PARTITIONS_START`` / ``_END`` values."""
    from pipelines.generator import load_trace
    from pipelines.views import parse_duration

    loaded = load_trace(trace)
    span_s = loaded.duration_s
    if duration:
        span_s = min(span_s, parse_duration(duration, "--duration") / 1000)
    return hours_span(loaded.start_s, loaded.start_s + span_s)


AUTOSCALE_DEFAULTS = {
    "SLUICE_AUTOSCALE_SENSOR": "on",
    "SLUICE_AUTOSCALE_SENSOR_INTERVAL_S": "10",
    "SLUICE_AUTOSCALE_SENSOR_COOLDOWN_S": "30",
}
"""The autoscaler in `up`: on, ticking every 10 s with a 30 s cooldown, since a replayed day
passes in minutes (a variable set by the user wins)."""


def dagster_environment(
    args: argparse.Namespace,
    children: dict[str, str],
    span: tuple[str, str] | None = None,
) -> dict[str, str]:
    """What Dagster gets besides the children's settings: the replay's partitions (``span``,
    default the trace's), the autoscaler (unless ``--no-autoscale``) and
    :func:`up_dagster_env`, each unless the user set it."""
    env = dict(children)
    start, end = span or replay_span(args.trace, args.duration)
    wanted = {"SLUICE_PARTITIONS_START": start, "SLUICE_PARTITIONS_END": end}
    if args.no_autoscale:
        wanted["SLUICE_AUTOSCALE_SENSOR"] = "off"
    else:
        wanted.update(AUTOSCALE_DEFAULTS)
    for name, value in wanted.items():
        if name not in os.environ or (name == "SLUICE_AUTOSCALE_SENSOR" and args.no_autoscale):
            env[name] = value
    env.update(up_dagster_env())
    return env


REPLAY_MAX_FUTURE_S = 24 * 3600.0
"""A file of one's own events may fall silent for a night (the flights example: no departure
from 23:59 to 05:00); one partition's silence is longer still, and past ``max_future_s`` (6 h
by default) a task refuses every later event as too far ahead of its watermark."""


class Source:
    """What `up` produces to its topic: the generator's trace, a file, or nothing (the
    topic's own producers)."""

    def __init__(self, args: argparse.Namespace, base: Runtime) -> None:
        views_file = str(Path(args.views).resolve()) if args.views else None
        views = base.active_views(views_file)  # a mistake stops here, before anything starts
        self.views_file = views_file
        self.topic = up_topic(views, base.settings.topic, "topic" in base.settings.model_fields_set)
        self.declaration = topic_declaration(views, self.topic)
        self.file: Path | None = args.replay
        self.span: tuple[str, str] | None = None
        self.generator = self.file is None and reads_generator_events(self.declaration)
        if self.file is not None:
            if not self.file.is_file():
                raise SluiceError(f"--replay: no such file: {self.file}")
            self.file = self.file.resolve()
            self.span = file_span(self.file, self.declaration)
        self.label = self.file.name if self.file else args.trace if self.generator else None

    def settings(self, settings: SluiceSettings, chosen: set[str]) -> SluiceSettings:
        """``settings`` on the source's topic and views file; for a file, events up to a day
        ahead of a task's watermark are taken (:data:`REPLAY_MAX_FUTURE_S`) unless the user
        chose ``SLUICE_MAX_FUTURE_S`` (``chosen``: the settings the user set)."""
        update: dict = {"topic": self.topic}
        if self.views_file is not None:
            update["views_file"] = self.views_file
        if self.file is not None and "max_future_s" not in chosen:
            update["max_future_s"] = max(settings.max_future_s, REPLAY_MAX_FUTURE_S)
        return SluiceSettings.model_validate({**settings.model_dump(), **update})

    def start(
        self, args: argparse.Namespace, env: dict[str, str], state_dir: Path, progress_file: Path
    ) -> subprocess.Popen | None:
        if self.file is not None:
            cmd = replay_command(
                self.file,
                self.topic,
                self.views_file,
                self.declaration,
                args.speedup,
                progress_file,
            )
            return start_process(cmd, env, state_dir / "logs" / "replay.log")
        if self.generator:
            return _generator(args, env, state_dir, progress_file)
        return None

    def started_line(self, args: argparse.Namespace, state_dir: Path) -> str:
        logs = f"logs in {state_dir / 'logs'}; Ctrl-C stops everything"
        if self.file is not None:
            return f"replaying {self.file} to {self.topic} at {args.speedup:g}x; {logs}"
        if self.generator:
            return (
                f"replaying {args.trace} ({args.duration} simulated at {args.speedup:g}x); {logs}"
            )
        return (
            f"waiting for events on {self.topic} (its declaration is not the generator's: "
            f"produce them, e.g. sluice replay FILE --topic {self.topic}); {logs}"
        )


def run(args: argparse.Namespace) -> int:
    base = Runtime.from_env()
    source = Source(args, base)
    chosen = set(base.settings.model_fields_set)
    settings = source.settings(up_settings(base.settings, args.flush_interval), chosen)
    runtime = Runtime(settings, base.kafka)
    state_dir = settings.resolved_state_dir
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    progress_file = state_dir / PROGRESS_FILE
    progress_file.unlink(missing_ok=True)
    console = stderr_console()
    started = Started()
    stop = threading.Event()
    signals: list[int] = []
    deadline = StopDeadline(
        settings.stop_timeout_s + STOP_MARGIN_S, "sluice up", last_step=started.kill
    )
    on_stop_signals(stop, deadline, then=signals.append)

    def body() -> None:
        nonlocal runtime
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
                started.keep("broker", broker)
                console.print(f"embedded broker pid {info.pid} at {info.bootstrap}")
            bootstrap = info.bootstrap
            kafka = runtime.kafka.model_copy(update={"bootstrap_servers": bootstrap})
            runtime = Runtime(settings, kafka)
        ensure_topics(
            bootstrap,
            {settings.topic: settings.partitions, settings.dead_letter_topic: 1},
            runtime.kafka,
        )
        fleet = start_fleet(
            runtime, args.agents, source.views_file, source.topic, started.fleets.append
        )
        console.print(f"{len(fleet.agents)} stream agents: {', '.join(fleet.agents)}")
        children = child_environment(runtime)
        if not args.no_dagster and SparkSettings().connect:
            started.spark_server = SparkConnectServer(state_dir)
            keeper = _start_spark_server({**os.environ, **children}, state_dir, console)
            if keeper is not None and not started.keep("spark", keeper):
                return
        if not args.no_dagster:
            env = dagster_environment(args, children, source.span)
            dagster = _start_dagster(settings, env, console)
            if dagster is not None and not started.keep("dagster", dagster):
                return
        generator = source.start(args, {**os.environ, **children}, state_dir, progress_file)
        if generator is not None and not started.keep("generator", generator):
            return
        console.print(source.started_line(args, state_dir), highlight=False)
        watch = Watch(runtime, generator, started.dagster, progress_file, source.label)
        watch.autoscale = not (args.no_autoscale or args.no_dagster)
        if not started.keep("watch", watch):
            return
        Supervisor(runtime, fleet).run(
            stop,
            2.0,
            lambda events, lags: watch.show(events, lags, args.exit_when_done),
            with_lags=True,
        )

    try:
        # the supervisor calls the broker and the control store; the main thread only waits,
        # so a signal is taken at once however long those calls take
        run_until_stopped(body, stop, "supervisor")
    finally:
        deadline.arm()  # a second Ctrl-C gives up at once, killing every child by PID
        console.print("stopping: generator, agents (checkpointing), Dagster, Spark, broker...")
        started.stop(settings.stop_timeout_s + 1)
        console.print("stopped")
    return 130 if signal.SIGINT in signals else 0


class Started:
    """What `up` started, so that the main thread stops it whatever the supervisor thread is
    doing: nothing is kept once stopping began (it is stopped at once instead)."""

    def __init__(self) -> None:
        self.broker: EmbeddedBroker | None = None
        self.fleets: list[LocalFleet] = []
        self.generator: subprocess.Popen | None = None
        self.spark: subprocess.Popen | None = None
        self.spark_server: SparkConnectServer | None = None
        self.dagster = None
        self.watch: Watch | None = None
        self.closed = False
        self.lock = threading.Lock()

    def keep(self, kind: str, thing) -> bool:
        """Remember ``thing`` (broker, dagster, generator, watch); False, and ``thing``
        stopped, if stopping already began."""
        with self.lock:
            if not self.closed:
                setattr(self, kind, thing)
                return True
        if kind in ("generator", "spark"):
            stop_process(thing, timeout_s=2)
        elif kind == "dagster":
            thing.stop(interrupt_timeout_s=2, term_timeout_s=2)
        elif kind == "broker":
            thing.stop(timeout_s=2)
        return False

    def stop(self, timeout_s: float) -> None:
        """Agents first in spirit (they checkpoint through the broker, stopped last), all at
        once in time: the generator, the agents and Dagster stop in parallel within
        ``timeout_s``, then the broker."""
        with self.lock:
            self.closed = True
        if self.watch is not None:
            self.watch.close()
        stops = [lambda: stop_process(self.generator, timeout_s)]
        stops.append(lambda: stop_process(self.spark, min(timeout_s, 10)))
        stops += [lambda fleet=fleet: fleet.close(timeout_s) for fleet in self.fleets]
        if self.dagster is not None:
            stops.append(lambda: self.dagster.stop(timeout_s - 4, 2))
        threads = [threading.Thread(target=s, daemon=True) for s in stops]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s + 1)
        if self.broker is not None:
            self.broker.stop(timeout_s=2)

    def kill(self) -> None:
        """SIGKILL every process started here (the stop deadline passed)."""
        with self.lock:
            self.closed = True
        for fleet in self.fleets:
            fleet.kill()
        running = [p for p in (self.generator, self.spark) if p is not None and p.poll() is None]
        groups = [p.pid for p in running]
        if self.spark_server is not None:  # its JVM is a process group of its own
            info = self.spark_server.info()
            if info is not None:
                groups.append(info.pid)
        if self.dagster is not None:
            groups.append(self.dagster.pgid)
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        info = self.broker.info() if self.broker is not None else None
        if info is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)


def _start_spark_server(
    env: dict[str, str], state_dir: Path, console: Console
) -> subprocess.Popen | None:
    """The keeper of the warm Spark Connect server corrections use (`sluice spark serve`),
    unless one runs already (`sluice spark start`: used, left running). It opens its port in
    the background while the rest starts; a correction before that uses spark-submit."""
    running = SparkConnectServer(state_dir).info()
    if running is not None:
        console.print(f"using the running Spark Connect server at {running.url}")
        return None
    command = [sys.executable, "-m", "orchestration.cli", "spark", "serve"]
    keeper = start_process(command, env, state_dir / "logs" / "spark-keeper.log")
    console.print(f"Spark Connect server for corrections: keeper pid {keeper.pid}")
    return keeper


def _start_dagster(settings: SluiceSettings, env: dict[str, str], console: Console):
    try:
        from orchestration.control_plane.dagster_service import start_dagster
    except ImportError as exc:
        console.print(f"[yellow]Dagster is not available ({exc}); continuing without it[/]")
        return None
    handle = start_dagster(settings, extra_env=env)
    console.print(f"Dagster UI: [bold]{handle.url}[/]")
    return handle


class Watch:
    """The live panel: the replay's progress, the fleet, Dagster; the line that says done; and
    above the panel, each Dagster run as it ends (followed in a thread of its own, so a slow
    webserver never holds up the supervisor)."""

    DAGSTER_POLL_S = 5.0

    def __init__(self, runtime, generator, dagster, progress_file: Path, trace: str | None) -> None:
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
        self.autoscale = False
        self.dagster_lines: SimpleQueue[str] = SimpleQueue()
        self.closing = threading.Event()
        self.follower: threading.Thread | None = None
        if dagster is not None:
            self.follower = threading.Thread(
                target=self._follow_dagster, name="dagster-feed", daemon=True
            )
            self.follower.start()

    def _follow_dagster(self) -> None:
        from orchestration.cli.dagster_feed import DagsterFeed

        feed = DagsterFeed(self.dagster.url, since=time.time())
        while not self.closing.wait(self.DAGSTER_POLL_S):
            for line in feed.poll():
                self.dagster_lines.put(line)

    def _print_dagster_lines(self) -> None:
        while True:
            try:
                line = self.dagster_lines.get_nowait()
            except Empty:
                return
            self.console.print(Text("dagster ", style="bold").append(line), highlight=False)

    def show(self, events: list[str], lags: list, exit_when_done: bool) -> bool:
        """Refresh the panel; True once ``exit_when_done`` and everything is done."""
        if not self.started:
            self.live.start()
            self.started = True
        for event in events:
            self.console.print(event)
        self._print_dagster_lines()
        progress = ReplayProgress.read(self.progress_file)
        table = render(lags, self.tracker.update(lags), job_view(self.runtime), self.console.width)
        lines = [self.replay_line(progress), self.links(), self.agents_line(lags)]
        self.live.update(Group(*lines, table), refresh=True)
        if self.generator is None:  # the topic's own producers: nothing ends
            return False
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
                f"[bold red]the replay failed (exit {self.generator.returncode}); see its log "
                f"in {self.runtime.settings.resolved_state_dir / 'logs'}[/]"
            )
            return exit_when_done
        if not (exit_when_done and self.done_at is not None):
            return False
        # one more flush interval so the last windows are in the segments
        return time.monotonic() - self.done_at > self.runtime.settings.flush_interval_s + 2

    def close(self) -> None:
        self.closing.set()
        if self.started:
            self.live.stop()
            self.started = False

    def replay_line(self, progress: ReplayProgress | None) -> Text:
        line = Text("replay  ", style="bold")
        if self.trace is None:
            return line.append(f"none: waiting for events on {self.runtime.settings.topic}")
        if progress is None:
            return line.append(f"{self.trace}: starting")
        hours = f"{progress.sim_s / 3600:,.1f} h of {progress.total_sim_s / 3600:,.1f} h simulated"
        line.append(f"{self.trace}: {hours}  {progress.produced:,} msgs  {progress.rate:,.0f}/s")
        if progress.done:
            line.append("  done", style="green")
        elif progress.eta_s is not None:
            line.append(f"  ETA {_duration(progress.eta_s)}")
        return line

    def agents_line(self, lags: list) -> Text:
        """``agents  2 running, planned 3 (mcts: why)``: the fleet's count now (the agents whose
        tasks report) and what the autoscaler last asked for (the control store's request)."""
        line = Text("agents  ", style="bold")
        topic = self.runtime.settings.topic
        try:
            scaling = self.runtime.control.scaling(topic)
        except SQLAlchemyError:
            scaling = None
        running = len({lag.status.worker_id for lag in lags if not lag.stale})
        applied = scaling["applied_workers"] if scaling else None
        line.append(f"{applied if applied is not None else running} running")
        if scaling and scaling["desired_workers"] != applied:
            line.append(f", planned {scaling['desired_workers']}", style="yellow")
        elif scaling and scaling["policy"]:
            line.append(f", planned {scaling['desired_workers']}")
        if scaling and scaling["policy"]:
            line.append(f" ({scaling['policy']}: {scaling['reason'][:80]})", style="dim")
        if not self.autoscale:
            line.append("  autoscaler off", style="dim")
        return line

    def links(self) -> Text:
        line = Text("dagster ", style="bold")
        if self.dagster is None:
            return line.append("not started (--no-dagster)", style="dim")
        return line.append(self.dagster.url)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
