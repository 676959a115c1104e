"""Errors of the batch correction; messages carry the offending values."""

from __future__ import annotations

from pipelines.exceptions import SluiceError

__all__ = ["ArchiveMissing", "BatchError", "InvalidHour", "UnknownView"]


class BatchError(SluiceError):
    """The batch correction was asked for something it cannot do."""


class InvalidHour(BatchError):
    """An hour is not an epoch-ms hour start, or a range of hours is empty."""


class UnknownView(BatchError):
    """A view name is not among the loaded view definitions."""


class ArchiveMissing(BatchError):
    """None of the requested hours has archived events."""
