"""A time value read as epoch milliseconds UTC, in each :class:`TimeFormat` a topic may declare.

Inference (:mod:`pipelines.events.infer`) and the file replay read times through these, so a
format the one proposes is one the other paces by.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from pipelines.events.declaration import TimeFormat

__all__ = ["EPOCH_FORMATS", "epoch_format_of", "read_time_ms"]

EPOCH_FORMATS = {
    TimeFormat.EPOCH_S: 1e-3,
    TimeFormat.EPOCH_MS: 1.0,
    TimeFormat.EPOCH_US: 1e3,
    TimeFormat.EPOCH_NS: 1e6,
}
"""Each epoch format, with how many of its units make a millisecond."""

# Instants from 1990 to 2100 in each unit: a number outside every range is not an epoch time.
_EPOCH_RANGES = {
    TimeFormat.EPOCH_S: (631_152_000, 4_102_444_800),
    TimeFormat.EPOCH_MS: (631_152_000_000, 4_102_444_800_000),
    TimeFormat.EPOCH_US: (631_152_000_000_000, 4_102_444_800_000_000),
    TimeFormat.EPOCH_NS: (631_152_000_000_000_000, 4_102_444_800_000_000_000),
}


def epoch_format_of(value: float) -> TimeFormat | None:
    """The epoch unit a number's magnitude fits (an instant from 1990 to 2100), or None."""
    for fmt, (low, high) in _EPOCH_RANGES.items():
        if low <= value < high:
            return fmt
    return None


def read_time_ms(
    value: object,
    fmt: TimeFormat | None,
    pattern: str | None = None,
    zone: str = "UTC",
) -> int:
    """``value`` as epoch ms UTC. ``fmt`` None: a number by its magnitude, a string as ISO-8601.

    Raises ValueError (or TypeError) for a value the format cannot read.
    """
    if isinstance(value, bool) or value is None:
        raise TypeError(f"not a time: {value!r}")
    if fmt is None:
        if isinstance(value, (int, float)):
            fmt = epoch_format_of(value)
            if fmt is None:
                raise ValueError(f"{value!r} is no epoch time from 1990 to 2100")
        else:
            fmt = TimeFormat.ISO8601
    if fmt in EPOCH_FORMATS:
        if isinstance(value, str):
            value = float(value)
        if not isinstance(value, (int, float)):
            raise TypeError(f"not an epoch number: {value!r}")
        return int(value / EPOCH_FORMATS[fmt])
    if not isinstance(value, str):
        raise TypeError(f"not a time string: {value!r}")
    if fmt is TimeFormat.ISO8601:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError(f"{value!r} has no Z or UTC offset")
    else:
        if pattern is None:
            raise ValueError("format pattern needs a pattern")
        parsed = datetime.strptime(value, pattern)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=ZoneInfo(zone))
    return int(parsed.astimezone(UTC).timestamp() * 1000)
