"""Running the stream fleet: agents on any host, the coordinator, a local supervisor.

``agent`` runs tasks as the job model in the control store says; ``coordinator`` and
``scheduling`` (Mist's controller) decide the job model; ``local`` supervises agent processes
on one machine for `sluice stream` / `sluice up`. AWS Auto Scaling is a realizer in
``orchestration/control_plane/autoscaling``. May import the control-plane library and ``pipelines``.
"""

from orchestration.control_plane.fleet.launch import child_environment, start_fleet
from orchestration.control_plane.fleet.local import AgentProcess, LocalFleet, local_agent_ids
from orchestration.control_plane.fleet.scheduling import describe_assignments
from orchestration.control_plane.fleet.supervisor import DeploymentWatcher, ScaleWatcher, Supervisor

__all__ = [
    "AgentProcess",
    "DeploymentWatcher",
    "LocalFleet",
    "ScaleWatcher",
    "Supervisor",
    "child_environment",
    "describe_assignments",
    "local_agent_ids",
    "start_fleet",
]
