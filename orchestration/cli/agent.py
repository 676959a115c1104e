"""`sluice agent`: run stream tasks on this host, as the job model in the control store says.

Start one per machine (an instance of the Auto Scaling group, an ECS task, a Kubernetes pod)
with the shared settings: the control store (PostgreSQL), the storage root and the broker.
`sluice stream` and `sluice up` start local agents the same way.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket

from orchestration.control_plane.fleet.agent import Agent
from orchestration.control_plane.runtime import Runtime

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "agent", help="run the stream tasks the job model assigns to this host"
    )
    parser.add_argument(
        "--id",
        default=None,
        help="agent id, unique in the fleet (default: HOSTNAME-PID, fine for one agent per host)",
    )
    parser.add_argument("--topic", default=None, help="default: SLUICE_TOPIC (events)")
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    agent_id = args.id or f"{socket.gethostname()}-{os.getpid()}"
    agent = Agent(runtime, agent_id, args.topic, args.views)
    agent.install_signal_handlers()
    return agent.run()
