"""``reconciliation_report``: one event-time day reconciled, stored and shown in the UI.

Daily partitions in event time (the day whose windows are reported), the days the hourly
partitions cover (:data:`assets.partitions.DAILY`). Materializing a day reconciles every view's 24 hours, draws the plots
and writes ``reports/<day>/reconciliation.{html,md,json}`` under the storage root; the
Markdown summary is the materialization's metadata, so the UI shows it inline, next to a
link to the HTML page. Failures are the report's content, not a failed run.
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.automation import REPORT_WHEN_CORRECTED
from assets.constants import RECONCILIATION_REPORT_KEY, REPORTS_GROUP, corrected_key
from assets.partitions import DAILY
from orchestration.resources import ControlStoreResource, StorageResource
from pipelines.config import get_settings
from pipelines.views import View

__all__ = ["DAILY", "build_reconciliation_report", "report_metadata"]


def report_metadata(data: Any, stored: Any) -> dict[str, Any]:
    """The summary inline (Markdown), where the page is, and the counts."""
    metadata: dict[str, Any] = {
        "summary": dg.MetadataValue.md(stored.markdown),
        "html": dg.MetadataValue.path(stored.html_location),
        **data.headline(),
        "causes": dg.MetadataValue.json(
            {v.name: data.causes_total(v.name).as_dict() for v in data.views}
        ),
        "failures": dg.MetadataValue.json([f for r in data.failed for f in r.failures]),
    }
    if stored.html_path is not None:
        metadata["open_html"] = dg.MetadataValue.url(stored.html_uri)
    return metadata


def build_reconciliation_report(views: Sequence[View]) -> dg.AssetsDefinition:
    """The daily report over ``views``, downstream of every ``corrected_<view>``."""
    enabled = [v for v in views if not v.disabled]

    @dg.asset(
        key=RECONCILIATION_REPORT_KEY,
        group_name=REPORTS_GROUP,
        deps=[corrected_key(v.name) for v in enabled],
        partitions_def=DAILY,
        automation_condition=REPORT_WHEN_CORRECTED,
        kinds={"html"},
        description="Realtime vs corrected per view and hour of an event-time day, the causes "
        "(late, duplicate, dead-lettered events), the fleet's lag and size: an HTML page with "
        "plots and a Markdown summary under reports/YYYY-MM-DD/ of the storage root.",
    )
    def _report(
        context: dg.AssetExecutionContext,
        storage: StorageResource,
        control_store: ControlStoreResource,
    ) -> dg.MaterializeResult:
        from quality.report import publish_report

        control = control_store.open()
        try:
            with storage.open_tables() as tables:
                data, stored = publish_report(
                    storage.open(),
                    control,
                    enabled,
                    context.partition_key,
                    topic=get_settings().topic,
                    tables=tables,
                )
        finally:
            control.close()
        for result in data.failed:
            context.log.warning("; ".join(result.failures))
        context.log.info("report of %s: %s", context.partition_key, stored.html_location)
        return dg.MaterializeResult(metadata=report_metadata(data, stored))

    return _report
