"""`sluice spark start|stop|status|serve`: the warm Spark Connect server corrections use.

``sluice up`` runs one by itself; these are for users who run Dagster themselves. ``start``
launches a detached keeper (``serve``) that runs the server on 127.0.0.1 with the
``SLUICE_SPARK_*`` settings and restarts it if it dies; ``stop`` stops both by PID; ``status``
says whether corrections can use it and its memory (exit 3 when not running). ``--json``
prints one object instead of the sentence.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from dataclasses import asdict

from orchestration.control_plane.spark.server import SparkConnectServer, keep_serving
from pipelines.batch.config import SparkSettings
from pipelines.config import get_settings

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "spark", help="start, stop or show the warm Spark Connect server of corrections"
    )
    parser.add_argument("action", choices=["start", "stop", "status", "serve"])
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="port (default: SLUICE_SPARK_CONNECT_PORT, else free)",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state_dir = get_settings().resolved_state_dir
    server = SparkConnectServer(state_dir)
    spark = SparkSettings()
    port = args.port or spark.connect_port
    if args.action == "serve":  # the keeper itself, in the foreground
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        keep_serving(state_dir, spark, stop, port)
        return 0
    if args.action == "start":
        info = server.start(port)
        text = f"Spark Connect server pid {info.pid} at {info.url} (keeper pid {info.keeper_pid})"
        print(json.dumps({"running": True, **asdict(info)}) if args.json else text)
        return 0
    if args.action == "stop":
        stopped = server.stop()
        text = "stopped" if stopped else "no Spark Connect server was running"
        print(json.dumps({"running": False, "stopped": stopped}) if args.json else text)
        return 0
    health = server.health()
    print(json.dumps(asdict(health)) if args.json else health.line())
    return 0 if health.running else 3
