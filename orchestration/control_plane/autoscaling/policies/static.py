"""`static`: a fixed worker count, provisioned for the peak; the baseline every saving is against."""

from __future__ import annotations

from collections.abc import Sequence

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.fleet_model import FleetModel
from orchestration.control_plane.autoscaling.metrics import FleetMetrics

__all__ = ["StaticPolicy"]


class StaticPolicy:
    """Always asks for the same count."""

    name = "static"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    @classmethod
    def from_settings(cls, settings: AutoscaleSettings) -> StaticPolicy:
        """The configured count, or the fewest workers whose (uneven) capacity covers the peak."""
        fleet = FleetModel.from_settings(settings.fleet)
        workers = settings.static.workers or fleet.workers_for(settings.simulation.peak_rate)
        return cls(workers)

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        if metrics.workers == self.workers:
            return ScalingDecision.no_change(metrics.workers, "static count", self.name)
        return ScalingDecision(
            self.workers, f"static count {self.workers}", self.name, current=metrics.workers
        )
