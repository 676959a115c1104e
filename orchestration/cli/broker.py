"""`sluice broker start|stop|status`: the embedded Kafka-protocol broker.

``--json`` prints one object (``running``, ``managed``, ``pid``, ``bootstrap``, ``log_file``)
instead of the sentence, for scripts; exit codes are the same.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from orchestration.control_plane.runtime import Runtime
from pipelines.kafka import EmbeddedBroker, ensure_topics

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("broker", help="start, stop or show the embedded broker")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(func=run)


def _say(args: argparse.Namespace, text: str, **fields: object) -> None:
    print(json.dumps(fields) if args.json else text)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    if runtime.kafka.bootstrap_servers:
        _say(
            args,
            f"KAFKA_BOOTSTRAP_SERVERS={runtime.kafka.bootstrap_servers} is set: Sluice uses that "
            "cluster and does not manage a broker",
            running=None,
            managed=False,
            bootstrap=runtime.kafka.bootstrap_servers,
        )
        return 0 if args.action == "status" else 1
    broker = EmbeddedBroker(runtime.settings.resolved_state_dir)
    if args.action == "start":
        info = broker.start(port=args.port)
        settings = runtime.settings
        ensure_topics(
            info.bootstrap,
            {settings.topic: settings.partitions, settings.dead_letter_topic: 1},
            runtime.kafka,
        )
        _say(
            args,
            f"embedded broker pid {info.pid} at {info.bootstrap} (log: {info.log_file})",
            running=True,
            managed=True,
            **asdict(info),
        )
        return 0
    if args.action == "stop":
        stopped = broker.stop()
        _say(
            args,
            "stopped" if stopped else "no embedded broker was running",
            running=False,
            managed=True,
            stopped=stopped,
        )
        return 0
    info = broker.info()
    if info is None:
        _say(args, "no embedded broker is running", running=False, managed=True)
        return 3
    _say(
        args,
        f"embedded broker pid {info.pid} at {info.bootstrap}",
        running=True,
        managed=True,
        **asdict(info),
    )
    return 0
