"""Jobs over assets: the hourly correction of every view, with the archive's completeness."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

from assets.constants import RAW_ARCHIVE_KEY, corrected_key
from pipelines.views import View

__all__ = ["CORRECTION_JOB", "build_correction_job"]

CORRECTION_JOB = "correct_views"


def build_correction_job(views: Sequence[View]) -> UnresolvedAssetJobDefinition:
    """``raw_archive`` and every ``corrected_<view>`` (with their checks) for an hour range."""
    selection = dg.AssetSelection.assets(
        RAW_ARCHIVE_KEY, *(corrected_key(v.name) for v in views if not v.disabled)
    )
    return dg.define_asset_job(
        CORRECTION_JOB,
        selection=selection,
        description="Record the archive's completeness and correct every view for the "
        "run's hours in one Spark job; the correction checks run after each view.",
    )
