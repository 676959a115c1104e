"""Group names and asset keys shared by the asset packages, checks, jobs and schedules."""

from __future__ import annotations

import dagster as dg

from orchestration.control_plane.settings import get_dagster_settings

__all__ = [
    "CORRECTED_PREFIX",
    "EVENTS_KEY",
    "RAW_ARCHIVE_KEY",
    "RAW_GROUP",
    "REALTIME_PREFIX",
    "RECONCILIATION_REPORT_KEY",
    "REPORTS_GROUP",
    "SPARK_POOL",
    "SPARK_RETRIES",
    "VIEWS_GROUP",
    "corrected_key",
    "realtime_key",
]

RAW_GROUP = "raw"
"""The ``events`` topic and the raw archive the stream workers write."""

VIEWS_GROUP = "views"
"""Per view: the realtime asset (deployed to the fleet) and the hourly corrected asset."""

REPORTS_GROUP = "reports"
"""The daily reconciliation report (HTML with plots, Markdown summary)."""

SPARK_POOL = "spark"
"""The concurrency pool of Spark corrections: the instance's limit (1 in the dagster.yaml Sluice
writes) keeps two corrections, e.g. two backfills of the same hours, from running at once."""

SPARK_RETRIES = dg.RetryPolicy(
    max_retries=2,
    delay=get_dagster_settings().correction_retry_delay_s,
    backoff=dg.Backoff.EXPONENTIAL,
)
"""A launch that failed (the JVM or the warm Spark Connect server died, EMR had no capacity) is
retried twice, 30 s then 60 s later (``SLUICE_CORRECTION_RETRY_DELAY_S``); a broken segment
rule is not retried."""

EVENTS_KEY = dg.AssetKey("events")
RAW_ARCHIVE_KEY = dg.AssetKey("raw_archive")
RECONCILIATION_REPORT_KEY = dg.AssetKey("reconciliation_report")


REALTIME_PREFIX = "realtime_"


def realtime_key(view: str) -> dg.AssetKey:
    """Key of the asset that deploys ``view`` to the stream fleet."""
    return dg.AssetKey(f"{REALTIME_PREFIX}{view}")


CORRECTED_PREFIX = "corrected_"


def corrected_key(view: str) -> dg.AssetKey:
    """Key of the hourly Spark correction of ``view``."""
    return dg.AssetKey(f"{CORRECTED_PREFIX}{view}")
