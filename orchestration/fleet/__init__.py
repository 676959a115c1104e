"""Running the stream-worker fleet: local worker processes and the one supervisor over them.

The fleet's agents across machines will live here too; AWS Auto Scaling is a realizer in
``orchestration/autoscaling``. May import the control-plane library and ``pipelines``.
"""

from orchestration.fleet.launch import child_environment, start_fleet
from orchestration.fleet.local import LocalFleet, WorkerProcess
from orchestration.fleet.supervisor import DeploymentWatcher, ScaleWatcher, Supervisor

__all__ = [
    "DeploymentWatcher",
    "LocalFleet",
    "ScaleWatcher",
    "Supervisor",
    "WorkerProcess",
    "child_environment",
    "start_fleet",
]
