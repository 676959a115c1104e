"""Asset factories: per view, a realtime asset (deployed to the stream fleet) and a corrected one.

``realtime_<view>`` materializes by validating the view and recording it in the control store, which
the stream workers follow; its lag and freshness are recorded as observations by the
``realtime_lag`` sensor. ``corrected_<view>`` is hourly: Spark recomputes the hours of the run's
partition range exactly from the raw archive and publishes batch segments that overshadow the
realtime ones (for a session view: the sessions that started in each hour,
:mod:`pipelines.batch.sessions`). All corrected views are one multi-asset launching one Spark job
through Dagster Pipes (:mod:`orchestration.control_plane.spark.correction_job`); its backfill policy
is a single run, so a backfill of many hours of many views reads the archive once, in the ``spark``
pool (one correction at a time unless the instance allows more).
"""

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

from assets.automation import CORRECT_WHEN_ARCHIVED
from assets.constants import (
    RAW_ARCHIVE_KEY,
    SPARK_POOL,
    SPARK_RETRIES,
    VIEWS_GROUP,
    corrected_key,
    realtime_key,
)
from assets.partitions import HOURLY, partition_key_for
from orchestration.control_plane.spark.correction_job import SEGMENT_RULES_CHECK, CorrectionRequest
from orchestration.resources import ControlStoreResource, SparkResource, StorageResource
from pipelines.config import get_settings
from pipelines.exceptions import DeclarationChangeRefused
from pipelines.kinds import kind_of
from pipelines.segments import hours_in_window
from pipelines.tables import Tables, batch_hours
from pipelines.views import View, format_duration, parse_views
from pipelines.views.evolution import check_against
from pipelines.views.topics import declarations_of

__all__ = ["build_corrected_assets", "build_realtime_asset", "build_view_assets"]

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
    role = kind_of(view).column_role(view, name)
    if role is not None:
        return role
    if name in view.grouping_cols:
        return "grouping column"
    if name in view.metric_columns:
        return "metric"
    return "window bound"


def _view_metadata(view: View) -> dict[str, Any]:
    settings = {
        name: dg.MetadataValue.json(value) if isinstance(value, list) else value
        for name, value in kind_of(view).settings(view).items()
    }
    return {
        "dagster/column_schema": column_schema(view),
        "topic": view.topic,
        **settings,
        "allowed_lateness": format_duration(view.allowed_lateness_ms),
        "metrics": dg.MetadataValue.json(view.metric_columns),
        "fingerprint": view.fingerprint,
    }


def build_realtime_asset(view: View, definition: Mapping[str, Any]) -> dg.AssetsDefinition:
    """``realtime_<view>``: materializing it (re)deploys the definition to the stream fleet,
    unless its topic's declaration changed in a way the archive or the other deployed views of
    the topic cannot follow (:func:`~pipelines.views.evolution.check_against`): the asset
    fails with the reason and what was deployed stays."""
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
    def _realtime(
        context: dg.AssetExecutionContext,
        control_store: ControlStoreResource,
        storage: StorageResource,
    ):
        topics = None if view.declaration is None else {view.topic: view.declaration}
        parse_views([definition], source=f"view {view.name}", topics=topics)  # what is deployed
        control = control_store.open()
        try:
            try:
                check_against([view], control.deployed_views(), storage.open())
            except DeclarationChangeRefused as exc:
                raise dg.Failure(
                    description=f"view {view.name} not deployed: {exc}", allow_retries=False
                ) from None
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


def _segment_metadata(segment: Mapping[str, Any]) -> dict[str, Any]:
    rows = int(segment["rows"])
    return {
        "version": segment["version"],
        "dagster/row_count": rows,
        "rows": rows,
        "events": segment["events"],
        "duplicates_dropped": segment["duplicates_dropped"],
        "files": dg.MetadataValue.json(list(segment["files"])),
        "seconds": segment["seconds"],
        "skipped": segment["skipped"],
        "reason": segment["reason"],
    }


def _table_metadata(view: View) -> dict[str, Any]:
    """Where any engine reads the view: its Iceberg table (docs/serving.md)."""
    settings = get_settings()
    return {
        "dagster/table_name": f"{settings.tables_namespace}.{view.name}",
        "dagster/uri": f"{settings.resolved_storage_root.rstrip('/')}/tables/{view.name}",
    }


def _table_state(tables: Tables, view: View, hours: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per hour of the run, the table after the correction: its snapshot and the hour's rows."""
    table = tables.find(view.name)
    if table is None or table.current_snapshot() is None:
        return {}
    per_hour = batch_hours(table, view, hours, count=True)
    snapshot = str(table.current_snapshot().snapshot_id)
    return {
        h: {
            "dagster/table_name": tables.name(view.name),
            "dagster/uri": table.location(),
            "snapshot_id": snapshot,
            "table_rows": per_hour.get(h, 0),
        }
        for h in hours
    }


def build_corrected_assets(
    views: Sequence[View], definitions: Mapping[str, Mapping[str, Any]]
) -> dg.AssetsDefinition:
    """``corrected_<view>`` of every view: the exact values of the run's hours, computed by the
    Spark correction job launched through Pipes (one launch for every view the run selects, so
    the archive is read once), with each view's segment-rules check reported by the job."""
    by_key = {corrected_key(v.name): v for v in views}
    specs = [
        dg.AssetSpec(
            key=key,
            group_name=VIEWS_GROUP,
            deps=[RAW_ARCHIVE_KEY],
            automation_condition=CORRECT_WHEN_ARCHIVED,
            code_version=view.fingerprint,
            kinds={"spark", "parquet"},
            description=f"{view.name} recomputed exactly from the raw archive per hour and "
            "published as a batch segment version that overshadows the realtime values.",
            metadata={**_view_metadata(view), **_table_metadata(view)},
        )
        for key, view in by_key.items()
    ]
    rules = [
        dg.AssetCheckSpec(
            SEGMENT_RULES_CHECK,
            asset=key,
            blocking=True,
            description="Every corrected segment held the view's value rules before it was "
            "published (not-null, ranges, sets, window grid); reported by the Spark job.",
        )
        for key in by_key
    ]

    @dg.multi_asset(
        name="corrected_views",
        specs=specs,
        check_specs=rules,
        partitions_def=HOURLY,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=True,
        pool=SPARK_POOL,
        retry_policy=SPARK_RETRIES,
    )
    def _corrected(
        context: dg.AssetExecutionContext, spark: SparkResource, storage: StorageResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        selected = [view for key, view in by_key.items() if key in context.selected_asset_keys]
        hours = hours_in_window(*context.partition_time_window)
        context.log.info(
            "correcting %s for %d hour(s)", ", ".join(v.name for v in selected), len(hours)
        )
        request = CorrectionRequest(
            definitions=[dict(definitions[v.name]) for v in selected],
            hours=list(hours),
            storage_root=storage.location(),
            asset_keys={v.name: corrected_key(v.name).to_user_string() for v in selected},
            topics=declarations_of(selected),
        )
        invocation = spark.run_correction(context, request)
        reported = invocation.get_results(implicit_materializations=False)  # only what it said
        checks = [r for r in reported if isinstance(r, dg.AssetCheckResult)]
        done = [r for r in reported if isinstance(r, dg.MaterializeResult)]
        corrected = {r.asset_key for r in done}
        missing = [v.name for v in selected if corrected_key(v.name) not in corrected]
        if missing:
            # Fail without a materialization: a failed blocking check would still record one,
            # and the hour would look corrected. The job published nothing of these views.
            broken = {
                c.asset_key.to_user_string(): str(c.metadata["violation"].value)
                for c in checks
                if not c.passed and "violation" in c.metadata
            }
            raise dg.Failure(
                description=f"not corrected: {', '.join(missing)}"
                + "".join(f"\n{key}: segment rules broken: {why}" for key, why in broken.items()),
                metadata={"not_corrected": dg.MetadataValue.json(missing)},
                allow_retries=not broken,
            )
        selected_checks = context.selected_asset_check_keys
        yield from (
            c for c in checks if dg.AssetCheckKey(c.asset_key, c.check_name) in selected_checks
        )
        targeted = set(context.partition_keys)
        with storage.open_tables() as tables:
            states = {r.asset_key: _table_state(tables, by_key[r.asset_key], hours) for r in done}
        for result in done:
            for hour, metadata in states[result.asset_key].items():
                context.add_asset_metadata(
                    metadata, asset_key=result.asset_key, partition_key=partition_key_for(hour)
                )
            segments = result.metadata.get("segments") if result.metadata else None
            for segment in getattr(segments, "value", segments) or []:
                hour = partition_key_for(segment["segment_start_ms"])
                if hour not in targeted:
                    # A sliding view's earlier segment, corrected again because its windows
                    # reach into this run's hours: Dagster takes metadata only for the run's
                    # partitions (it failed the run), so the run's log says it instead.
                    context.log.info(
                        "%s %s: corrected again (its windows reach into this run's hours)",
                        result.asset_key.to_user_string(),
                        hour,
                    )
                    continue
                context.add_asset_metadata(
                    _segment_metadata(segment), asset_key=result.asset_key, partition_key=hour
                )
                if segment["skipped"]:
                    # Hours without archived events (a closed night, the hours of a day before
                    # its stream began) are complete and stay realtime-only; said, not failed.
                    context.log.warning(
                        "%s %s: %s", result.asset_key.to_user_string(), hour, segment["reason"]
                    )
            yield result

    return _corrected


def build_view_assets(
    views: list[View], definitions: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dg.AssetsDefinition], list[dg.AssetsDefinition]]:
    """Realtime and corrected assets of every enabled view."""
    enabled = [v for v in views if not v.disabled]
    realtime = [build_realtime_asset(v, definitions[v.name]) for v in enabled]
    corrected = [build_corrected_assets(enabled, definitions)] if enabled else []
    return realtime, corrected
