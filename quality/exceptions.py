"""Errors of the data-quality layer: one root, one-line classes, offending values in messages."""

from __future__ import annotations

from pipelines.exceptions import ConfigError, SluiceError

__all__ = ["InvalidReportDay", "QualityError", "SchemaViolation"]


class QualityError(SluiceError):
    """Data did not meet a quality rule Sluice enforces."""


class SchemaViolation(QualityError):
    """Data crossing a boundary breaks its schema; the message names columns, checks, values."""


class InvalidReportDay(ConfigError):
    """The day to report is not a YYYY-MM-DD UTC date Sluice can report."""
