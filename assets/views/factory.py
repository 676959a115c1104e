"""Asset factories: per view, a realtime asset (deployed to the stream fleet) and a corrected one.

``realtime_<view>`` materializes by validating the view and recording it in the control
store, which the stream workers follow; its lag and freshness are recorded as observations
by the ``realtime_lag`` sensor. ``corrected_<view>`` is hourly: Spark recomputes the hours of
the run's partition range exactly from the raw archive and publishes batch segments that
overshadow the realtime ones. Its backfill policy is a single run, so a backfill of many
hours reads the archive once in one Spark job.
"""

import logging
from collections.abc import Mapping
from typing import Any

import dagster as dg

from assets.automation import CORRECT_WHEN_ARCHIVED
from assets.constants import RAW_ARCHIVE_KEY, VIEWS_GROUP, corrected_key, realtime_key
from assets.partitions import HOURLY, partition_key_for
from orchestration.resources import ControlStoreResource, SparkResource, StorageResource
from pipelines.segments import hours_in_window
from pipelines.views import View, format_duration, parse_views

__all__ = ["build_corrected_asset", "build_realtime_asset", "build_view_assets"]

log = logging.getLogger(__name__)


def column_schema(view: View) -> dg.TableSchema:
    """What a query of the view returns, as Dagster's standard column schema."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(field.name, str(field.type), description=_column_role(view, field.name))
            for field in view.output_schema()
        ]
    )


def _column_role(view: View, name: str) -> str:
    if name in view.grouping_cols:
        return "grouping column"
    if name in view.metric_columns:
        return "metric"
    return "window bound"


def _view_metadata(view: View) -> dict[str, Any]:
    return {
        "dagster/column_schema": column_schema(view),
        "topic": view.topic,
        "grouping_cols": dg.MetadataValue.json(list(view.grouping_cols)),
        "interval": format_duration(view.interval_ms),
        "allowed_lateness": format_duration(view.allowed_lateness_ms),
        "metrics": dg.MetadataValue.json(view.metric_columns),
        "fingerprint": view.fingerprint,
    }


def build_realtime_asset(view: View, definition: Mapping[str, Any]) -> dg.AssetsDefinition:
    """``realtime_<view>``: materializing it (re)deploys the definition to the stream fleet."""
    definition = dict(definition)

    @dg.asset(
        key=realtime_key(view.name),
        group_name=VIEWS_GROUP,
        deps=["events"],
        code_version=view.fingerprint,
        kinds={"kafka"},
        description=f"{view.description or view.name} Computed by the stream workers within "
        "seconds; materialize to deploy or update the definition.",
        metadata=_view_metadata(view),
    )
    def _realtime(context: dg.AssetExecutionContext, control_store: ControlStoreResource):
        parse_views([definition], source=f"view {view.name}")  # validate what is deployed
        control = control_store.open()
        try:
            changed = control.deploy_view(view.name, view.fingerprint, definition)
            state = next(
                (d["state"] for d in control.deployed_views() if d["name"] == view.name), None
            )
        finally:
            control.close()
        context.log.info(
            "view %s %s (state %s)", view.name, "deployed" if changed else "unchanged", state
        )
        return dg.MaterializeResult(
            metadata={"changed": changed, "state": state or "", "fingerprint": view.fingerprint}
        )

    return _realtime


def build_corrected_asset(view: View) -> dg.AssetsDefinition:
    """``corrected_<view>``: the exact values of the run's hours, computed by Spark."""

    @dg.asset(
        key=corrected_key(view.name),
        group_name=VIEWS_GROUP,
        deps=[RAW_ARCHIVE_KEY],
        partitions_def=HOURLY,
        backfill_policy=dg.BackfillPolicy.single_run(),
        automation_condition=CORRECT_WHEN_ARCHIVED,
        code_version=view.fingerprint,
        kinds={"spark", "parquet"},
        description=f"{view.name} recomputed exactly from the raw archive per hour and "
        "published as a batch segment version that overshadows the realtime values.",
        metadata=_view_metadata(view),
    )
    def _corrected(
        context: dg.AssetExecutionContext, spark: SparkResource, storage: StorageResource
    ) -> dg.MaterializeResult:
        from pipelines.batch import correct_hours
        from quality.schemas import validate_spark_segment

        hours = hours_in_window(*context.partition_time_window)
        context.log.info("correcting %s for %d hour(s)", view.name, len(hours))
        results = correct_hours(
            spark.get_session(),
            storage.open(),
            [view],
            hours,
            s3_scheme=spark.s3_scheme(),
            validate_segment=validate_spark_segment,  # a violation fails the run, unpublished
        )
        for result in results:
            context.add_asset_metadata(
                {
                    "version": result.version,
                    "dagster/row_count": result.rows,
                    "rows": result.rows,
                    "events": result.events,
                    "duplicates_dropped": result.duplicates_dropped,
                    "files": dg.MetadataValue.json(list(result.files)),
                    "seconds": round(result.seconds, 3),
                    "skipped": result.skipped,
                    "reason": result.reason,
                },
                partition_key=partition_key_for(result.segment_start_ms),
            )
        # Hours without archived events (a closed night with no traffic, the hours of a day
        # before its stream began) are complete and stay realtime-only: nothing is published
        # and the materialization says so, so the day's report can follow.
        skipped = [r for r in results if r.skipped]
        for result in skipped:
            context.log.warning("%s: %s", partition_key_for(result.segment_start_ms), result.reason)
        return dg.MaterializeResult(
            metadata={
                "segments_published": len(results) - len(skipped),
                "segments_skipped": len(skipped),
                "dagster/row_count": sum(r.rows for r in results),
                "rows": sum(r.rows for r in results),
                "events": sum(r.events for r in results),
                "duplicates_dropped": sum(r.duplicates_dropped for r in results),
            }
        )

    return _corrected


def build_view_assets(
    views: list[View], definitions: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dg.AssetsDefinition], list[dg.AssetsDefinition]]:
    """Realtime and corrected assets of every enabled view."""
    enabled = [v for v in views if not v.disabled]
    realtime = [build_realtime_asset(v, definitions[v.name]) for v in enabled]
    corrected = [build_corrected_asset(v) for v in enabled]
    return realtime, corrected
