"""What a policy sees of the fleet: one immutable snapshot per decision, every metric with a unit.

Metrics come from a collector (the simulator's, or later the live lag collector); any of them may
be missing, so a snapshot stores NaN rather than guessing and policies check `missing()` first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum

__all__ = ["FleetMetrics", "Metric"]


class Metric(Enum):
    """The metrics a snapshot carries, each with its unit (the value is the field name)."""

    TIME = ("time", "s")
    WORKERS = ("workers", "workers")
    PARTITIONS = ("partitions", "partitions")
    INPUT_RATE = ("input_rate", "msg/s")
    PROCESSING_RATE = ("processing_rate", "msg/s")
    TRUE_PROCESSING_RATE = ("true_processing_rate", "msg per busy-second per worker")
    UTILISATION = ("utilisation", "fraction 0..1")
    BACKLOG = ("backlog", "msg")
    BACKLOG_GROWTH = ("backlog_growth", "msg/s")
    TIME_LAG = ("time_lag", "s")

    def __init__(self, field_name: str, unit: str) -> None:
        self.field_name = field_name
        self.unit = unit


def _is_missing(value: float | int | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


@dataclass(frozen=True, slots=True)
class FleetMetrics:
    """A snapshot of the stream fleet at `time` (seconds); NaN marks a metric not measured.

    Rates are averages over the collector's window (the last decision step in the simulator);
    `true_processing_rate` is records per second of busy time per worker (DS2), so it does not
    depend on how busy the worker was; `time_lag` is the age of the oldest unprocessed message.
    """

    time: float
    workers: int
    partitions: int
    input_rate: float = math.nan
    processing_rate: float = math.nan
    true_processing_rate: float = math.nan
    utilisation: float = math.nan
    backlog: float = math.nan
    backlog_growth: float = math.nan
    time_lag: float = math.nan

    def get(self, metric: Metric) -> float:
        """The value of one metric (NaN if missing)."""
        value = getattr(self, metric.field_name)
        return math.nan if value is None else float(value)

    def missing(self, *metrics: Metric) -> list[Metric]:
        """Which of `metrics` are missing or not finite, so a policy can name them in a warning."""
        out = []
        for metric in metrics:
            value = getattr(self, metric.field_name)
            if _is_missing(value) or not math.isfinite(float(value)):
                out.append(metric)
        return out

    def as_dict(self) -> dict[str, float]:
        """Plain dict for JSON output and logs."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
