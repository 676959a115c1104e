"""Errors of the data-quality layer: one root, one-line classes, offending values in messages."""

from __future__ import annotations

from pipelines.exceptions import SluiceError

__all__ = ["QualityError", "SchemaViolation"]


class QualityError(SluiceError):
    """Data did not meet a quality rule Sluice enforces."""


class SchemaViolation(QualityError):
    """Data crossing a boundary breaks its schema; the message names columns, checks, values."""
