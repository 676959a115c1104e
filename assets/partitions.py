"""The hourly and daily partitions of the archive, the corrections and the report, in event time.

They span the data, not the calendar: the first hour is ``SLUICE_PARTITIONS_START`` if set,
else the start of the day of the first hour the raw archive holds (read once, when the code
location loads: reload it after a new deployment's first hour is archived), else the start of
the earliest shipped trace (2014-04-10, nothing archived yet). The last is
``SLUICE_PARTITIONS_END`` (exclusive) if set, else the current hour. ``sluice up`` sets both to
the replay's span, so the UI shows the replayed day, not twelve years of empty hours. The
start is a day's start so that each daily partition of the report has its 24 hours.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import dagster as dg

from orchestration.control_plane.settings import PARTITION_FORMAT, get_dagster_settings
from pipelines.config import get_settings
from pipelines.exceptions import SluiceError
from pipelines.segments import parse_hour_label
from pipelines.storage import ObjectStore, open_store

__all__ = [
    "DAILY",
    "DEFAULT_PARTITIONS_START",
    "HOURLY",
    "PARTITION_FORMAT",
    "daily_partitions",
    "first_archived_hour",
    "hourly_partitions",
    "partition_key_for",
    "partition_span",
]

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS_START = "2014-04-10-00:00"
"""The earliest shipped trace's first hour: the start while nothing is archived."""
ARCHIVED_EVENTS_PREFIX = "archive/events/"


def first_archived_hour(store: ObjectStore) -> datetime | None:
    """The first event-time hour the raw archive holds events of (listing keys, no reads)."""
    labels = {
        key.removeprefix(ARCHIVED_EVENTS_PREFIX).split("/", 1)[0].removeprefix("hour=")
        for key in store.list(ARCHIVED_EVENTS_PREFIX)
    }
    hours = []
    for label in labels:
        try:
            hours.append(parse_hour_label(label))
        except ValueError:
            continue  # not an hour directory
    return datetime.fromtimestamp(min(hours) / 1000, tz=UTC) if hours else None


def _archive_start() -> str | None:
    """The day of the first archived hour, or None (nothing archived, or unreadable)."""
    settings = get_settings()
    try:
        store = open_store(
            settings.resolved_storage_root, settings.s3_endpoint_url, settings.storage_timeout_s
        )
        first = first_archived_hour(store)
    except (SluiceError, OSError) as exc:
        log.warning("partitions: cannot list the raw archive (%s); starting at the default", exc)
        return None
    if first is None:
        return None
    return first.replace(hour=0).strftime(PARTITION_FORMAT)


def partition_span(start: str | None = None, end: str | None = None) -> tuple[str, str | None]:
    """(first hour, end hour or None for the current hour) as ``YYYY-MM-DD-HH:MM``."""
    settings = get_dagster_settings()
    start = start or settings.partitions_start or _archive_start() or DEFAULT_PARTITIONS_START
    return start, end or settings.partitions_end


def hourly_partitions(start: str | None = None, end: str | None = None) -> dg.PartitionsDefinition:
    """UTC hours of :func:`partition_span`."""
    start, end = partition_span(start, end)
    return dg.HourlyPartitionsDefinition(
        start_date=start, end_date=end, timezone="UTC", fmt=PARTITION_FORMAT
    )


def daily_partitions(hourly: dg.TimeWindowPartitionsDefinition) -> dg.PartitionsDefinition:
    """UTC days whose 24 hours are all in ``hourly`` (a partial last day has no report, unless
    it is the only day)."""
    start = hourly.start.replace(hour=0, minute=0)
    end = None
    if hourly.end is not None:
        end = max(hourly.end.replace(hour=0, minute=0), start + timedelta(days=1))
    return dg.DailyPartitionsDefinition(
        start_date=start.strftime("%Y-%m-%d"),
        end_date=end.strftime("%Y-%m-%d") if end else None,
        timezone="UTC",
    )


HOURLY = hourly_partitions()
"""The one hourly partitioning shared by ``raw_archive`` and every ``corrected_<view>``."""
DAILY = daily_partitions(HOURLY)
"""Event-time UTC days of the report, the days :data:`HOURLY` covers whole."""
FIRST_HOUR_MS = int(HOURLY.start.timestamp() * 1000)
END_HOUR_MS = int(HOURLY.end.timestamp() * 1000) if HOURLY.end is not None else None
"""The first hour and the end (exclusive, None = open) of :data:`HOURLY` as epoch ms."""


def partition_key_for(hour_ms: int) -> str:
    """The partition key of the hour starting at ``hour_ms``."""
    return datetime.fromtimestamp(hour_ms / 1000, tz=UTC).strftime(PARTITION_FORMAT)


def in_partitions(hour_ms: int) -> bool:
    """Whether the hour starting at ``hour_ms`` is one of :data:`HOURLY`'s."""
    return hour_ms >= FIRST_HOUR_MS and (END_HOUR_MS is None or hour_ms < END_HOUR_MS)
