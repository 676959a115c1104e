"""Autoscaling of the stream fleet: metrics, policies, the MCTS planner, guards, realizers and
the simulator that replays traffic traces against all of them.

The loop is collect -> decide (a policy) -> review (guards) -> realize; each collaborator is a
small value-in/value-out piece so the simulator, a Dagster sensor or a test can assemble it.
The simulator and the planners model the fleet one way (``fleet_model``); what only the
benchmark measures against (the offline optimum, a perfect forecast, Pareto marks) lives in
``evaluation``.

May import: ``orchestration.control_plane.lag`` and ``pipelines``; no Dagster (the sensor that runs
it lives in ``orchestration.sensors``).
"""

from __future__ import annotations

from orchestration.control_plane.autoscaling.capacity import (
    efficient_count,
    fleet_capacity,
    workers_for_rate,
)
from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.exceptions import (
    AutoscalingError,
    InvalidFleetParameter,
    RealizerError,
    ScalingTimeout,
    TraceFormatError,
    TraceNotFound,
    UnknownPolicy,
)
from orchestration.control_plane.autoscaling.fleet_model import FleetModel
from orchestration.control_plane.autoscaling.forecast import SeasonalTrendForecaster
from orchestration.control_plane.autoscaling.mcts import (
    CostModel,
    MctsPlanner,
    Plan,
    PlanningProblem,
)
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.policies import POLICIES, ScalingPolicy, make_policy
from orchestration.control_plane.autoscaling.realizers import (
    AwsAutoScalingRealizer,
    Realizer,
    RescaleEvent,
    SimulatedRealizer,
)
from orchestration.control_plane.autoscaling.simulator import (
    PolicySummary,
    SimulationResult,
    Simulator,
    Trace,
    load_trace,
    simulate,
    summarise,
)
from orchestration.control_plane.autoscaling.vetoes import (
    BoundsGuard,
    CooldownGuard,
    GuardContext,
    GuardVerdict,
    HysteresisGuard,
    apply_guards,
    default_guards,
)

__all__ = [
    "POLICIES",
    "AutoscaleSettings",
    "AutoscalingError",
    "AwsAutoScalingRealizer",
    "BoundsGuard",
    "CooldownGuard",
    "CostModel",
    "FleetMetrics",
    "FleetModel",
    "GuardContext",
    "GuardVerdict",
    "HysteresisGuard",
    "InvalidFleetParameter",
    "MctsPlanner",
    "Metric",
    "Plan",
    "PlanningProblem",
    "PolicySummary",
    "Realizer",
    "RealizerError",
    "RescaleEvent",
    "ScalingDecision",
    "ScalingPolicy",
    "ScalingTimeout",
    "SeasonalTrendForecaster",
    "SimulatedRealizer",
    "SimulationResult",
    "Simulator",
    "Trace",
    "TraceFormatError",
    "TraceNotFound",
    "UnknownPolicy",
    "apply_guards",
    "default_guards",
    "efficient_count",
    "fleet_capacity",
    "load_trace",
    "make_policy",
    "simulate",
    "summarise",
    "workers_for_rate",
]
