"""Time units and hour arithmetic of the on-disk format: every key names UTC hours."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

__all__ = [
    "HOUR_MS",
    "hour_label",
    "hour_runs",
    "hour_start",
    "hours_in_window",
    "parse_hour_label",
]

HOUR_MS = 3_600_000
"""One hour in milliseconds: event times, segments and archive hours are epoch ms."""


def hour_start(epoch_ms: int) -> int:
    """The start of the UTC hour holding ``epoch_ms``."""
    return epoch_ms - epoch_ms % HOUR_MS


def hour_label(epoch_ms: int) -> str:
    """``2015-02-26T21``: the UTC hour of ``epoch_ms`` as keys spell it."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H")


def parse_hour_label(label: str) -> int:
    """Epoch ms of an hour label (the inverse of :func:`hour_label`)."""
    moment = datetime.strptime(label, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def hours_in_window(start: datetime, end: datetime) -> list[int]:
    """Epoch-ms starts of the hours in ``[start, end)`` (e.g. a run's partition time window)."""
    first = int(start.timestamp() * 1000)
    last = int(end.timestamp() * 1000)
    return list(range(hour_start(first), last, HOUR_MS))


def hour_runs(hours: Iterable[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of consecutive ``hours`` (hour starts, epoch ms), in order:
    a day is one range to scan or filter, not 24."""
    runs: list[list[int]] = []
    for hour in sorted(set(hours)):
        if runs and hour == runs[-1][1]:
            runs[-1][1] = hour + HOUR_MS
        else:
            runs.append([hour, hour + HOUR_MS])
    return [(start, end) for start, end in runs]
