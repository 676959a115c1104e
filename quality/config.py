"""The data-quality options: how strict the checks are and how suites learn their bounds.

Typed settings (:mod:`pipelines.settings`: environment, then the settings file, then these
defaults), read where a check, a report or a script starts and passed down as values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pipelines.settings import SluiceBaseSettings, load_settings

__all__ = ["CheckSettings", "ExpectationSettings"]


class CheckSettings(SluiceBaseSettings):
    """How far realtime may be from corrected and still pass (the reconciliation checks)."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_CHECK_", extra="ignore")

    relative_tolerance: float = Field(
        default=0.05, ge=0, description="Accuracy target: relative error of exact aggregations."
    )
    approximate_tolerance: float = Field(
        default=0.10, ge=0, description="Accuracy target of sketches (HLL distinct counts, KLL)."
    )
    statistic: Literal["mean", "max"] = Field(
        default="mean", description="Which per-metric relative error meets the target."
    )
    group_mismatch: float = Field(
        default=0.05, ge=0, description="Bound on (missing + extra groups) / corrected groups."
    )
    unexplained_share: float = Field(
        default=0.0,
        ge=0,
        description="Share of an exact metric's rows (or of the groups) that may differ with no "
        "late or duplicate event in their window to explain it.",
    )
    hll_sigmas: float = Field(
        default=3.0, ge=0, description="An HLL distinct count is off beyond this many RSEs."
    )
    hll_outside_share: float = Field(
        default=0.01,
        ge=0,
        description="Share of HLL rows that may be beyond hll_sigmas (plus one row).",
    )

    @classmethod
    def from_env(cls) -> CheckSettings:
        """The settings in force; a bad value raises one error naming the variable."""
        return load_settings(cls)


class ExpectationSettings(SluiceBaseSettings):
    """How the row-count bounds are learned and how much of a failure is kept as a sample."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_EXPECT_", extra="ignore")

    rows_history_hours: int = Field(
        default=24,
        ge=1,
        description="Hours before the checked ones whose published corrections teach the "
        "row-count bound (SLUICE_EXPECT_ROWS_HISTORY_HOURS).",
    )
    rows_min_history: int = Field(
        default=3,
        ge=1,
        description="Fewer published segments than this in that history: no row-count "
        "expectation, and the result says so (SLUICE_EXPECT_ROWS_MIN_HISTORY).",
    )
    rows_factor: float = Field(
        default=3.0,
        gt=1.0,
        description="Rows per segment may be within [median / f, median * f] of the history "
        "(SLUICE_EXPECT_ROWS_FACTOR). A wide multiplicative band around the median: rows are "
        "windows x active groups, which follow the daily traffic, and the median ignores one "
        "odd hour where mean +- k std over a few hours would not.",
    )
    sample_size: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Unexpected rows kept per failed expectation (SLUICE_EXPECT_SAMPLE_SIZE).",
    )

    @classmethod
    def from_env(cls) -> ExpectationSettings:
        """The settings from ``SLUICE_EXPECT_*``; a bad value raises one error naming them all."""
        return load_settings(cls)
