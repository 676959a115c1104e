"""Errors of the reconciliation report."""

from pipelines.exceptions import ConfigError


class InvalidReportDay(ConfigError):
    """The day to report is not a YYYY-MM-DD UTC date Sluice can report."""
