"""The hourly partitions of the archive and the corrections, in event (trace) time.

Event time is the replayed trace's time, so partitions start where the earliest shipped trace
starts (elb_request_count begins 2014-04-10; nyc_taxi, the default of `sluice up`, 2014-07-01;
the Twitter traces 2015-02-26), so every shipped trace's hours can be corrected from the UI;
``SLUICE_PARTITIONS_START`` moves the
start and ``SLUICE_PARTITIONS_END`` (optional) caps the end, e.g. at the trace's last hour.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import dagster as dg

from orchestration.settings import PARTITION_FORMAT, DagsterSettings, get_dagster_settings

__all__ = [
    "DEFAULT_PARTITIONS_START",
    "HOURLY",
    "PARTITION_FORMAT",
    "hourly_partitions",
    "partition_key_for",
]

DEFAULT_PARTITIONS_START = DagsterSettings.model_fields["partitions_start"].default


def hourly_partitions(start: str | None = None, end: str | None = None) -> dg.PartitionsDefinition:
    """UTC hours from ``start`` (``YYYY-MM-DD-HH:MM``); defaults from the environment."""
    settings = get_dagster_settings()
    start = start or settings.partitions_start
    end = end or settings.partitions_end
    return dg.HourlyPartitionsDefinition(
        start_date=start, end_date=end, timezone="UTC", fmt=PARTITION_FORMAT
    )


HOURLY = hourly_partitions()
"""The one hourly partitioning shared by ``raw_archive`` and every ``corrected_<view>``."""


def partition_key_for(hour_ms: int) -> str:
    """The partition key of the hour starting at ``hour_ms``."""
    return datetime.fromtimestamp(hour_ms / 1000, tz=UTC).strftime(PARTITION_FORMAT)


def partition_keys_for(hours: Iterable[int]) -> list[str]:
    return [partition_key_for(h) for h in hours]
