"""Errors of the autoscaler: one class per thing that can go wrong, all under `SluiceError`.

Messages carry the offending value (a path, a line, a rate, a group name) so the user can fix
the input without reading code.
"""

from __future__ import annotations

from pipelines.exceptions import SluiceError
from pipelines.generator.trace import TraceFormatError, TraceNotFound  # the trace's errors

__all__ = [
    "AutoscalingError",
    "InvalidFleetParameter",
    "NoFeasiblePlan",
    "RealizerError",
    "ScalingTimeout",
    "TraceFormatError",
    "TraceNotFound",
    "UnknownPolicy",
]


class AutoscalingError(SluiceError):
    """Root of the autoscaler's errors."""


class InvalidFleetParameter(AutoscalingError):
    """A fleet or simulation parameter (rate, partitions, SLA, days) is out of range."""


class NoFeasiblePlan(AutoscalingError):
    """No schedule of worker counts keeps the lag within the SLA (the offline optimum)."""


class UnknownPolicy(AutoscalingError):
    """A policy name is not in the registry."""


class RealizerError(AutoscalingError):
    """The backend refused or failed to apply a worker count."""


class ScalingTimeout(RealizerError):
    """Workers did not reach the target count before the deadline."""
