"""Schedules: the hourly correction, and the daily reconciliation report.

Correction: each hour is corrected once its late data had time to arrive.
The schedule fires every hour at minute ``grace % 60`` (UTC) and requests the hour that ended
at least ``SLUICE_CORRECTION_GRACE_MINUTES`` (default 15) ago. Hours the archive holds no
events for are skipped with a reason. Event time is replayed trace time in demos, so hours
of the past are corrected from the UI (partition picker, backfill) instead.

Report: on ``SLUICE_REPORT_CRON`` (default ``30 0 * * *``, UTC) a run of the report job for the
previous UTC day, skipped when the archive holds no event of that day; replayed days (event
time in the past) are reported from the UI's partition picker or `sluice report --date D`.
"""

from datetime import UTC, date, datetime, timedelta
from typing import Any

import dagster as dg

from assets.partitions import HOURLY, partition_key_for
from orchestration.control_plane.settings import DagsterSettings
from orchestration.resources import StorageResource
from pipelines.segments import HOUR_MS
from pipelines.settings import load_settings
from quality.completeness import archive_completeness

AssetJob = Any
"""What ``dg.define_asset_job`` returns: resolved against the assets when the definitions
load (its class is not public API)."""

__all__ = [
    "DEFAULT_GRACE_MINUTES",
    "DEFAULT_REPORT_CRON",
    "REPORT_SCHEDULE",
    "build_correction_schedule",
    "build_report_schedule",
    "day_to_report",
    "grace_minutes",
    "hour_to_correct",
    "report_cron",
]


DEFAULT_GRACE_MINUTES = DagsterSettings.model_fields["correction_grace_minutes"].default
DEFAULT_REPORT_CRON = DagsterSettings.model_fields["report_cron"].default
REPORT_SCHEDULE = "reconciliation_report_daily"


def grace_minutes() -> int:
    """``SLUICE_CORRECTION_GRACE_MINUTES``: how long after an hour ends it is corrected."""
    return load_settings(DagsterSettings).correction_grace_minutes


def hour_to_correct(scheduled: datetime, grace: int) -> int:
    """Epoch ms of the latest hour that ended at least ``grace`` minutes before ``scheduled``."""
    cutoff = scheduled.astimezone(UTC) - timedelta(minutes=grace)
    cutoff_ms = int(cutoff.timestamp() * 1000)
    return cutoff_ms - cutoff_ms % HOUR_MS - HOUR_MS


def build_correction_schedule(
    job: AssetJob,
    grace: int | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
) -> dg.ScheduleDefinition:
    """Hourly at minute ``grace % 60``: a run of ``job`` for the hour past its grace period."""
    grace = grace_minutes() if grace is None else grace

    @dg.schedule(
        name=f"{job.name}_hourly",
        job=job,
        cron_schedule=f"{grace % 60} * * * *",
        execution_timezone="UTC",
        default_status=default_status,
        description=f"Correct each hour {grace} minutes after it ends (late data grace).",
    )
    def _schedule(
        context: dg.ScheduleEvaluationContext, storage: StorageResource
    ) -> dg.RunRequest | dg.SkipReason:
        scheduled = context.scheduled_execution_time or datetime.now(UTC)
        hour = hour_to_correct(scheduled, grace)
        key = partition_key_for(hour)
        (report,) = archive_completeness(storage.open(), [hour])
        if report.events == 0:
            return dg.SkipReason(f"no archived events for hour {key}")
        return dg.RunRequest(
            run_key=f"correct-{key}",
            partition_key=key,
            tags={"sluice/trigger": "schedule", "sluice/archive_complete": str(report.complete)},
        )

    return _schedule


def report_cron() -> str:
    """``SLUICE_REPORT_CRON``: when the daily report runs (UTC), default ``30 0 * * *``."""
    return load_settings(DagsterSettings).report_cron


def day_to_report(scheduled: datetime) -> date:
    """The UTC day before the one ``scheduled`` falls on."""
    return scheduled.astimezone(UTC).date() - timedelta(days=1)


def build_report_schedule(
    job: AssetJob,
    cron: str | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
) -> dg.ScheduleDefinition:
    """On ``cron`` (UTC): a run of ``job`` for the previous day, if the archive holds any of it."""
    cron = cron or report_cron()

    @dg.schedule(
        name=REPORT_SCHEDULE,
        job=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=default_status,
        description=f"Reconciliation report of the previous UTC day ({cron}, UTC).",
    )
    def _schedule(
        context: dg.ScheduleEvaluationContext, storage: StorageResource
    ) -> dg.RunRequest | dg.SkipReason:
        scheduled = context.scheduled_execution_time or datetime.now(UTC)
        day = day_to_report(scheduled)
        if day < HOURLY.start.date():
            return dg.SkipReason(f"{day} is before the first partition {HOURLY.start.date()}")
        start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
        hours = [start + i * HOUR_MS for i in range(24)]
        events = sum(h.events for h in archive_completeness(storage.open(), hours))
        if events == 0:
            return dg.SkipReason(f"no archived events of {day}: nothing to report")
        return dg.RunRequest(
            run_key=f"report-{day.isoformat()}",
            partition_key=day.isoformat(),
            tags={"sluice/trigger": "schedule"},
        )

    return _schedule
