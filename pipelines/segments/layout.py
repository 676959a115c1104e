"""Where things live under the storage root, in one place.

    segments/<view>/<segment>/realtime/<topic>-<partition>.parquet   a task's partials (version 0)
    segments/<view>/<segment>/batch/v<version>/part-*.parquet        a correction's exact values
    segments/<view>/<segment>/_published.json                        the newest published batch
    checkpoints/<topic>/<partition>.parquet                           a task's state and offsets
    archive/events/hour=<hour>/<topic>-<partition>-<first>-<end>.parquet
    archive/dead_letters/hour=<hour>/<topic>-<partition>-<first>-<end>.parquet
    archive/ranges/<topic>/<partition>/<first>-<end>.json             what one flush archived

``<segment>`` and ``<hour>`` are UTC hours such as ``2015-02-26T21``.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = [
    "archive_dead_letters_key",
    "archive_events_key",
    "archive_range_key",
    "archive_ranges_prefix",
    "batch_prefix",
    "checkpoint_key",
    "hour_label",
    "parse_hour_label",
    "published_key",
    "realtime_key",
    "realtime_prefix",
    "segment_prefix",
    "view_prefix",
]


def hour_label(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H")


def parse_hour_label(label: str) -> int:
    moment = datetime.strptime(label, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def view_prefix(view: str) -> str:
    return f"segments/{view}/"


def segment_prefix(view: str, segment_start_ms: int) -> str:
    return f"segments/{view}/{hour_label(segment_start_ms)}/"


def realtime_prefix(view: str, segment_start_ms: int) -> str:
    return f"{segment_prefix(view, segment_start_ms)}realtime/"


def realtime_key(view: str, segment_start_ms: int, topic: str, partition: int) -> str:
    return f"{realtime_prefix(view, segment_start_ms)}{topic}-{partition}.parquet"


def batch_prefix(view: str, segment_start_ms: int, version: int) -> str:
    return f"{segment_prefix(view, segment_start_ms)}batch/v{version}/"


def published_key(view: str, segment_start_ms: int) -> str:
    return f"{segment_prefix(view, segment_start_ms)}_published.json"


def checkpoint_key(topic: str, partition: int) -> str:
    return f"checkpoints/{topic}/{partition}.parquet"


def archive_events_key(hour_ms: int, topic: str, partition: int, first: int, end: int) -> str:
    return f"archive/events/hour={hour_label(hour_ms)}/{topic}-{partition}-{first}-{end}.parquet"


def archive_dead_letters_key(hour_ms: int, topic: str, partition: int, first: int, end: int) -> str:
    return (
        f"archive/dead_letters/hour={hour_label(hour_ms)}/{topic}-{partition}-{first}-{end}.parquet"
    )


def archive_ranges_prefix(topic: str, partition: int) -> str:
    return f"archive/ranges/{topic}/{partition}/"


def archive_range_key(topic: str, partition: int, first: int, end: int) -> str:
    return f"{archive_ranges_prefix(topic, partition)}{first:020d}-{end:020d}.json"
