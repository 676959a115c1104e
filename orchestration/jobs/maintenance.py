"""The tables' maintenance: a job on a schedule (on by default) that expires each view
table's snapshots past the retention and removes the files nothing references any more
(:mod:`pipelines.tables.maintenance`; `sluice tables maintain` runs the same now)."""

import dagster as dg

from assets.constants import corrected_key
from orchestration.control_plane.runtime import Runtime
from orchestration.resources import StorageResource
from pipelines.config import SluiceSettings, get_settings
from pipelines.segments import HOUR_MS
from pipelines.tables import ViewTables
from pipelines.tables.maintenance import maintain

__all__ = ["TABLES_MAINTENANCE_JOB", "build_tables_maintenance_schedule", "tables_maintenance"]

TABLES_MAINTENANCE_JOB = "tables_maintenance"


@dg.op(description="Expire old snapshots and remove orphan files of every view's table.")
def maintain_view_tables(context: dg.OpExecutionContext, storage: StorageResource) -> None:
    settings = get_settings()
    with storage.open_tables() as tables:
        _maintain(context, tables, settings)


def _maintain(context: dg.OpExecutionContext, tables: ViewTables, settings: SluiceSettings) -> None:
    for view in Runtime.from_env().active_views():
        if tables.find(view.name) is None:
            continue
        report = maintain(
            tables,
            view,
            int(settings.tables_snapshot_retention_h * HOUR_MS),
            int(settings.tables_realtime_snapshot_retention_m * 60_000),
        )
        context.log.info(
            f"{view.name}: {report.snapshots_expired} snapshot(s) expired, "
            f"{report.snapshots_kept} kept, {report.files_removed} orphan file(s) removed"
        )
        context.log_event(
            dg.AssetObservation(
                asset_key=corrected_key(view.name),
                metadata={
                    "dagster/table_name": tables.name(view.name),
                    "snapshots_expired": report.snapshots_expired,
                    "snapshots_kept": report.snapshots_kept,
                    "orphan_files_removed": report.files_removed,
                    "orphan_bytes_removed": report.bytes_removed,
                    "data_files": report.data_files,
                    "max_data_files_per_hour": report.max_files_per_hour,
                },
            )
        )


@dg.job(
    name=TABLES_MAINTENANCE_JOB,
    description="Expire the views' table snapshots older than SLUICE_TABLES_SNAPSHOT_RETENTION_H "
    "and remove the files no snapshot references (docs/serving.md).",
)
def tables_maintenance() -> None:
    maintain_view_tables()


def build_tables_maintenance_schedule(cron: str | None = None) -> dg.ScheduleDefinition:
    """On ``SLUICE_TABLES_MAINTENANCE_CRON`` (UTC), running by default."""
    return dg.ScheduleDefinition(
        name=f"{TABLES_MAINTENANCE_JOB}_schedule",
        job=tables_maintenance,
        cron_schedule=cron or get_settings().tables_maintenance_cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
