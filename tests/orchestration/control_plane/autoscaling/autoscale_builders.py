"""Builders shared by the autoscaling tests: snapshots and small traces."""

from __future__ import annotations

import numpy as np

from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.simulator import Trace


def snapshot(**overrides: float) -> FleetMetrics:
    """A healthy steady fleet: 4 workers at 50% of 1000 msg/s each, no backlog."""
    base = dict(
        time=3600.0,
        workers=4,
        partitions=16,
        input_rate=2000.0,
        processing_rate=2000.0,
        true_processing_rate=1000.0,
        utilisation=0.5,
        backlog=0.0,
        backlog_growth=0.0,
        time_lag=0.0,
    )
    base.update(overrides)
    return FleetMetrics(**base)  # type: ignore[arg-type]


def trace_of(rates: list[float], step_s: float = 300.0, name: str = "t") -> Trace:
    """A trace with one point per `step_s` (values are used as msg/s after scaling)."""
    return Trace(name, np.arange(len(rates)) * step_s, np.array(rates, dtype=float))
