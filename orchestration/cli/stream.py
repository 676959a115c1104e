"""`sluice stream --views FILE --workers N`: run the stream-worker fleet on its own."""

from __future__ import annotations

import argparse
import signal
import threading
import time

from rich.console import Console

from orchestration.fleet import LocalFleet
from orchestration.fleet.samples import FleetSampler
from orchestration.job_model import plan_job_model
from orchestration.runtime import Runtime
from pipelines.kafka import ensure_topics
from pipelines.stream import TaskId

__all__ = ["DeploymentWatcher", "ScaleWatcher", "register", "start_fleet"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stream", help="run N stream workers over the events topic")
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--topic", default=None, help="default: SLUICE_TOPIC (events)")
    parser.set_defaults(func=run)


def start_fleet(
    runtime: Runtime, workers: int, views_file: str | None, topic: str | None
) -> LocalFleet:
    """Validate the views, make sure the topics exist, plan the job model and start workers."""
    settings = runtime.settings
    views = runtime.active_views(views_file)  # fail fast on a bad definition
    topic = topic or settings.topic
    if not any(v.topic == topic for v in views):
        from pipelines.exceptions import ViewDefinitionError

        raise ViewDefinitionError(f"no view reads topic {topic!r}; nothing for the workers to do")
    bootstrap = runtime.bootstrap()
    ensure_topics(
        bootstrap, {topic: settings.partitions, settings.dead_letter_topic: 1}, runtime.kafka
    )
    from pipelines.kafka import consumer

    probe = consumer(bootstrap, runtime.kafka)
    try:
        partitions = sorted(probe.partitions_for_topic(topic) or [])
    finally:
        probe.close()
    job_model = plan_job_model([TaskId(topic, p) for p in partitions], workers)
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SLUICE_STATE_DIR": str(settings.resolved_state_dir),
    }
    fleet = LocalFleet(
        job_model,
        views_file=views_file or str(settings.views_file),
        env=env,
        log_dir=settings.resolved_state_dir / "logs",
    )
    fleet.start()
    return fleet


class DeploymentWatcher:
    """Reloads the fleet when a view is deployed, changed or disabled in the control store."""

    def __init__(self, runtime: Runtime, fleet: LocalFleet, every_s: float = 5.0) -> None:
        self.runtime = runtime
        self.fleet = fleet
        self.every_s = every_s
        self.version = runtime.deployment_version()
        self.next_check = time.monotonic() + every_s
        runtime.mark_deployed_running()

    def check(self) -> list[str]:
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + self.every_s
        version = self.runtime.deployment_version()
        if version == self.version:
            return []
        self.version = version
        self.fleet.restart("view deployments changed")
        self.runtime.mark_deployed_running()
        return ["view deployments changed: workers restarted from their checkpoints"]


class ScaleWatcher:
    """Carries out scaling requests from the control store (Guardian's queue) on a local fleet."""

    def __init__(
        self, runtime: Runtime, fleet: LocalFleet, topic: str, every_s: float = 2.0
    ) -> None:
        self.runtime = runtime
        self.fleet = fleet
        self.topic = topic
        self.every_s = every_s
        self.next_check = 0.0
        runtime.control.record_applied(topic, len(fleet.workers))

    def check(self) -> list[str]:
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + self.every_s
        request = self.runtime.control.scaling(self.topic)
        if request is None or request["desired_workers"] == len(self.fleet.workers):
            return []
        before = len(self.fleet.workers)
        job_model = self.fleet.rescale(request["desired_workers"])
        self.runtime.control.record_applied(self.topic, len(job_model.workers))
        return [
            f"rescaled {before} -> {len(job_model.workers)} workers ({request['policy']}: "
            f"{request['reason']}): {job_model.describe()}"
        ]


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
    watcher = DeploymentWatcher(runtime, fleet)
    scaler = ScaleWatcher(runtime, fleet, args.topic or runtime.settings.topic)
    sampler = FleetSampler(runtime)
    try:
        while not stop.wait(1.0):
            for event in [*fleet.supervise(), *watcher.check(), *scaler.check()]:
                console.print(event)
            sampler.maybe_record()
    except KeyboardInterrupt:
        pass
    finally:
        console.print("stopping workers (each checkpoints first)...")
        fleet.stop()
    return 0
