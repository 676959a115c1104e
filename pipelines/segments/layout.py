"""Every key under the storage root; the layout is drawn in :mod:`pipelines.segments`."""

from __future__ import annotations

import re
from datetime import date

from pipelines.segments.time import hour_label

__all__ = [
    "RANGES_PREFIX",
    "REPORTS_PREFIX",
    "REPORT_FORMATS",
    "archive_dead_letters_key",
    "archive_events_key",
    "archive_range_key",
    "archive_ranges_prefix",
    "bucket_suffix",
    "checkpoint_generation",
    "checkpoint_key",
    "checkpoint_prefix",
    "legacy_checkpoint_key",
    "parse_checkpoint_key",
    "parse_range_name",
    "parse_task_checkpoint_key",
    "parse_task_label",
    "realtime_key",
    "realtime_prefix",
    "report_keys",
    "segment_prefix",
    "task_label",
    "view_prefix",
]


def view_prefix(view: str) -> str:
    return f"segments/{view}/"


def segment_prefix(view: str, segment_start_ms: int) -> str:
    return f"segments/{view}/{hour_label(segment_start_ms)}/"


def realtime_prefix(view: str, segment_start_ms: int) -> str:
    return f"{segment_prefix(view, segment_start_ms)}realtime/"


def bucket_suffix(bucket: int, factor: int) -> str:
    """``-b5of8``: how a key names bucket 5 of 8 of a partition after the partition or offset
    range it follows ("" for a whole partition, so its keys stay those of an unsplit one)."""
    return "" if factor == 1 else f"-b{bucket}of{factor}"


def task_label(partition: int, bucket: int = 0, factor: int = 1) -> str:
    """``3`` for a whole partition, ``3-b5of8`` for bucket 5 of 8 of it (a virtual task)."""
    return f"{partition}{bucket_suffix(bucket, factor)}"


def parse_task_label(label: str) -> tuple[int, int, int] | None:
    """(partition, bucket, factor) of a :func:`task_label`, None for anything else."""
    if label.isdigit():
        return int(label), 0, 1
    partition, sep, rest = label.partition("-b")
    bucket, of, factor = rest.partition("of")
    if sep and of and partition.isdigit() and bucket.isdigit() and factor.isdigit():
        return int(partition), int(bucket), int(factor)
    return None


def realtime_key(
    view: str, segment_start_ms: int, topic: str, partition: int, bucket: int = 0, factor: int = 1
) -> str:
    label = task_label(partition, bucket, factor)
    return f"{realtime_prefix(view, segment_start_ms)}{topic}-{label}.parquet"


def checkpoint_prefix(topic: str, partition: int, bucket: int = 0, factor: int = 1) -> str:
    return f"checkpoints/{topic}/{task_label(partition, bucket, factor)}/"


def checkpoint_key(
    topic: str, partition: int, generation: int, bucket: int = 0, factor: int = 1
) -> str:
    """One object per owner generation: a fenced owner's write never replaces a newer one's."""
    return f"{checkpoint_prefix(topic, partition, bucket, factor)}g{generation:010d}.parquet"


def checkpoint_generation(key: str) -> int | None:
    """The generation of a :func:`checkpoint_key`, None for any other key."""
    name = key.rpartition("/")[2]
    digits = name.removeprefix("g").removesuffix(".parquet")
    if not (name.startswith("g") and name.endswith(".parquet") and digits.isdigit()):
        return None
    return int(digits)


def parse_checkpoint_key(key: str) -> tuple[str, int, int] | None:
    """(topic, partition, generation) of a whole partition's checkpoint key of either layout,
    else None (see :func:`parse_task_checkpoint_key` for virtual tasks' too)."""
    parts = key.split("/")
    if len(parts) == 4 and parts[0] == "checkpoints" and parts[2].isdigit():
        generation = checkpoint_generation(key)
        return None if generation is None else (parts[1], int(parts[2]), generation)
    if len(parts) == 3 and parts[0] == "checkpoints":
        partition = parts[2].removesuffix(".parquet")
        if parts[2].endswith(".parquet") and partition.isdigit():
            return parts[1], int(partition), 0
    return None


def parse_task_checkpoint_key(key: str) -> tuple[str, int, int, int, int] | None:
    """(topic, partition, bucket, factor, generation) of any task's checkpoint key, else None."""
    parts = key.split("/")
    if len(parts) == 4 and parts[0] == "checkpoints":
        task = parse_task_label(parts[2])
        generation = checkpoint_generation(key)
        if task is not None and generation is not None:
            return parts[1], *task, generation
        return None
    parsed = parse_checkpoint_key(key)
    return None if parsed is None else (parsed[0], parsed[1], 0, 1, parsed[2])


def legacy_checkpoint_key(topic: str, partition: int) -> str:
    """Where checkpoints lived before generations (read as generation 0, never written)."""
    return f"checkpoints/{topic}/{partition}.parquet"


def _range_name(topic: str, partition: int, first: int, end: int, bucket: int, factor: int) -> str:
    return f"{topic}-{partition}-{first}-{end}{bucket_suffix(bucket, factor)}"


_RANGE_NAME = re.compile(r"^(.+)-(\d+)-(\d+)-(\d+)(?:-b(\d+)of(\d+))?$")


def parse_range_name(key: str) -> tuple[str, int, int, int, int, int] | None:
    """(topic, partition, first, end, bucket, factor) of an archive file's key, else None."""
    name = key.rpartition("/")[2].removesuffix(".parquet")
    match = _RANGE_NAME.match(name)
    if match is None:
        return None
    topic, partition, first, end, bucket, factor = match.groups()
    return topic, int(partition), int(first), int(end), int(bucket or 0), int(factor or 1)


def archive_events_key(
    hour_ms: int, topic: str, partition: int, first: int, end: int, bucket: int = 0, factor: int = 1
) -> str:
    name = _range_name(topic, partition, first, end, bucket, factor)
    return f"archive/events/hour={hour_label(hour_ms)}/{name}.parquet"


def archive_dead_letters_key(
    hour_ms: int, topic: str, partition: int, first: int, end: int, bucket: int = 0, factor: int = 1
) -> str:
    name = _range_name(topic, partition, first, end, bucket, factor)
    return f"archive/dead_letters/hour={hour_label(hour_ms)}/{name}.parquet"


RANGES_PREFIX = "archive/ranges/"
REPORTS_PREFIX = "reports/"
REPORT_FORMATS = ("html", "md", "json")


def archive_ranges_prefix(topic: str, partition: int) -> str:
    return f"{RANGES_PREFIX}{topic}/{partition}/"


def archive_range_key(
    topic: str, partition: int, first: int, end: int, bucket: int = 0, factor: int = 1
) -> str:
    suffix = bucket_suffix(bucket, factor)
    return f"{archive_ranges_prefix(topic, partition)}{first:020d}-{end:020d}{suffix}.json"


def report_keys(day: date) -> dict[str, str]:
    """Storage keys of a day's reconciliation report, by format."""
    return {
        fmt: f"{REPORTS_PREFIX}{day.isoformat()}/reconciliation.{fmt}" for fmt in REPORT_FORMATS
    }
