"""`sluice worker`: run one stream worker on fixed tasks, without a job model (benchmarks and
debugging; the fleet starts `sluice agent` processes, which follow the job model)."""

from __future__ import annotations

import argparse
import logging

from orchestration.control_plane.runtime import Runtime
from pipelines.exceptions import ConfigError
from pipelines.stream import StreamWorker, TaskId, open_worker_clients

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="run one stream worker on given tasks")
    parser.add_argument("--id", required=True, help="worker id, e.g. w0")
    parser.add_argument(
        "--tasks", required=True, help="comma-separated TOPIC:PARTITION, e.g. events:0,events:2"
    )
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    parser.add_argument(
        "--exit-when-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop (with a checkpoint) after this long without new messages",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    try:
        tasks = [TaskId.parse(t) for t in args.tasks.split(",") if t]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    topics = sorted({t.topic for t in tasks})
    if len(topics) != 1:
        raise ConfigError(f"--tasks must name tasks of one topic, got {topics or 'none'}")
    worker = StreamWorker(
        worker_id=args.id,
        tasks=tasks,
        views=runtime.active_views(args.views),
        settings=runtime.settings,
        clients=open_worker_clients(runtime.bootstrap(), runtime.kafka, topics[0]),
        store=runtime.store,
        control=runtime.control,
    )
    worker.install_signal_handlers()
    log.info("worker %s running %s", args.id, ", ".join(map(str, tasks)))
    worker.run(max_idle_s=args.exit_when_idle)
    return 0
