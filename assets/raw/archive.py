"""The raw archive, hour by hour: what the stream workers archived and whether it is complete.

Stream tasks write the archive as they go; materializing an hour here does not copy data,
it records the hour's completeness (partitions, offset ranges, gaps, event and dead-letter
counts) from the range records, so the UI shows per hour what a correction will read.
"""

import logging
from typing import Any

import dagster as dg

from assets.constants import EVENTS_KEY, RAW_ARCHIVE_KEY, RAW_GROUP
from assets.partitions import HOURLY, partition_key_for
from orchestration.resources import StorageResource
from pipelines.segments import hours_in_window
from quality.completeness import HourCompleteness, archive_completeness

__all__ = ["hour_metadata", "raw_archive"]

log = logging.getLogger(__name__)


def hour_metadata(hour: HourCompleteness) -> dict[str, Any]:
    """What a materialization of one hour of ``raw_archive`` records (also the sensor's)."""
    return {
        "events": hour.events,
        "dead_letters": hour.dead_letters,
        "range_records": hour.range_records,
        "partitions": dg.MetadataValue.json(list(hour.partitions)),
        "offset_ranges": dg.MetadataValue.json(hour.as_dict()["offset_ranges"]),
        "gaps": dg.MetadataValue.json(hour.as_dict()["gaps"]),
        "open_partitions": dg.MetadataValue.json(list(hour.open_partitions)),
        "complete": hour.complete,
    }


@dg.asset(
    key=RAW_ARCHIVE_KEY,
    group_name=RAW_GROUP,
    deps=[EVENTS_KEY],
    partitions_def=HOURLY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    kinds={"parquet"},
    description="Every valid event by event-time hour (archive/events/hour=...), written by "
    "the stream workers; a materialization records the hour's completeness.",
)
def raw_archive(
    context: dg.AssetExecutionContext, storage: StorageResource
) -> dg.MaterializeResult:
    """Record, per hour of the run's partition range, what the archive holds."""
    hours = hours_in_window(*context.partition_time_window)
    report = archive_completeness(storage.open(), hours)
    for hour in report:
        context.add_asset_metadata(
            hour_metadata(hour), partition_key=partition_key_for(hour.hour_ms)
        )
    empty = [h.label for h in report if h.events == 0]
    if empty:
        context.log.warning("no archived events for %d hour(s): %s", len(empty), ", ".join(empty))
    return dg.MaterializeResult()
