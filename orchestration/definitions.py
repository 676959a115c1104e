"""The one place that builds Dagster ``Definitions``; ``workspace.yaml`` points here.

The views in force are resolved once, here, when the code location loads
(:meth:`orchestration.control_plane.runtime.Runtime.views_in_force`; reload the location after
editing the views file or deploying elsewhere); the view and report assets are built from them, the
raw archive's loaded from ``assets/raw``, with the group names of :mod:`assets.constants`; checks
(schemas, nothing lost, expectation suites, reconciliation), the correction and report jobs and
schedules and the sensors are built from the same views; the resources are the set ``SLUICE_ENV``
picks.
"""

from __future__ import annotations

import dagster as dg

import assets.raw
from assets.constants import RAW_GROUP
from assets.freshness import with_freshness
from assets.raw.archive_checks import build_archive_schema_check
from assets.raw.lineage_checks import build_nothing_lost_check
from assets.reports import build_reconciliation_report
from assets.views import build_view_assets
from assets.views.checks import build_correction_checks
from assets.views.expectation_checks import build_expectation_checks
from assets.views.lag_check import build_lag_checks
from orchestration.control_plane.runtime import Runtime
from orchestration.control_plane.settings import DagsterSettings
from orchestration.jobs.correction import (
    build_correction_job,
    build_report_job,
    scale_stream_workers,
)
from orchestration.jobs.maintenance import build_tables_maintenance_schedule, tables_maintenance
from orchestration.jobs.recovery import RECOVERY_JOBS, evacuate_spot_instance
from orchestration.jobs.spark import check_spark
from orchestration.resources import get_resources
from orchestration.schedules import build_correction_schedule, build_report_schedule
from orchestration.sensors import (
    make_alert_sensors,
    make_archive_hours_sensor,
    make_autoscaling_sensor,
    make_events_sensor,
    make_realtime_lag_sensor,
    make_spot_interruption_sensor,
)
from pipelines.config import get_settings
from pipelines.settings import load_settings

__all__ = ["VIEWS", "corrected_assets", "defs", "realtime_assets", "reconciliation_report"]


VIEWS, DEFINITIONS = Runtime.from_env().views_in_force()
"""The views of this code location, validated and resolved."""
SETTINGS = load_settings(DagsterSettings)

realtime_assets, corrected_assets = build_view_assets(VIEWS, DEFINITIONS)
reconciliation_report = build_reconciliation_report(VIEWS)

correction_job = build_correction_job(VIEWS)
report_job = build_report_job()

RESOURCES = get_resources()

defs = dg.Definitions(
    assets=with_freshness(
        [
            *dg.load_assets_from_package_module(assets.raw, group_name=RAW_GROUP),
            *realtime_assets,
            *corrected_assets,
            reconciliation_report,
        ],
        SETTINGS.correction_fresh_minutes,
        SETTINGS.report_fresh_hours,
        SETTINGS.realtime_fresh_minutes,
    ),
    asset_checks=[
        *build_correction_checks(VIEWS),
        *build_expectation_checks(VIEWS),
        *build_lag_checks(VIEWS, SETTINGS.realtime_lag_sla_s),
        build_nothing_lost_check(),
        build_archive_schema_check(VIEWS),
    ],
    jobs=[
        correction_job,
        report_job,
        scale_stream_workers,
        tables_maintenance,
        *RECOVERY_JOBS,
        check_spark,
    ],
    # Wall-clock schedules stay available (turn them on in the UI) but are off: the
    # automation above follows event time, which also corrects replayed days.
    schedules=[
        build_correction_schedule(correction_job, default_status=dg.DefaultScheduleStatus.STOPPED),
        build_report_schedule(report_job, default_status=dg.DefaultScheduleStatus.STOPPED),
        build_tables_maintenance_schedule(),  # wall-clock on purpose: it ages snapshots
    ],
    sensors=[
        make_archive_hours_sensor(
            VIEWS,
            SETTINGS.correction_grace_minutes,
            idle_close_s=SETTINGS.idle_close_s,
            minimum_interval_seconds=SETTINGS.automation_interval_s,
        ),
        dg.AutomationConditionSensorDefinition(
            "sluice_automation",
            target=dg.AssetSelection.all(),
            default_status=dg.DefaultSensorStatus.RUNNING,
            # Evaluated by the sensor daemon, one sensor after another, not by the asset
            # daemon beside it: the archive-hours sensor's closed hours are stored one event
            # at a time, and an evaluation in the middle of them split a stretch's
            # correction into several runs.
            use_user_code_server=True,
            minimum_interval_seconds=SETTINGS.automation_interval_s,
            description="Corrects archive hours once they are complete and reports a day once "
            "all its hours are corrected (assets/automation.py).",
        ),
        make_realtime_lag_sensor(
            VIEWS,
            lag_sla_s=SETTINGS.realtime_lag_sla_s,
            waiting_max_s=get_settings().task_waiting_max_s,
            fresh_minutes=SETTINGS.realtime_fresh_minutes,
            table_lag_alert_s=get_settings().table_lag_alert_s,
        ),
        make_events_sensor(),
        *make_alert_sensors(SETTINGS.automation_interval_s),
        make_autoscaling_sensor(scale_stream_workers, default_start_s=RESOURCES["fleet"].start_s()),
        make_spot_interruption_sensor(evacuate_spot_instance),
    ],
    resources=RESOURCES,
    # Steps run one after another in the run's process: Spark parallelises the work, and a
    # process per step would start a JVM (and import Dagster, PySpark, great-expectations)
    # per corrected view and check.
    executor=dg.in_process_executor,
)
