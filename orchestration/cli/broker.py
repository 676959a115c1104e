"""`sluice broker start|stop|status`: the embedded Kafka-protocol broker."""

from __future__ import annotations

import argparse

from orchestration.runtime import Runtime
from pipelines.kafka import EmbeddedBroker, ensure_topics

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("broker", help="start, stop or show the embedded broker")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    if runtime.kafka.bootstrap_servers:
        print(
            f"KAFKA_BOOTSTRAP_SERVERS={runtime.kafka.bootstrap_servers} is set: Sluice uses that "
            "cluster and does not manage a broker"
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
        print(f"embedded broker pid {info.pid} at {info.bootstrap} (log: {info.log_file})")
        return 0
    if args.action == "stop":
        print("stopped" if broker.stop() else "no embedded broker was running")
        return 0
    info = broker.info()
    if info is None:
        print("no embedded broker is running")
        return 3
    print(f"embedded broker pid {info.pid} at {info.bootstrap}")
    return 0
