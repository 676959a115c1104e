"""A time field's value as epoch milliseconds UTC, for each declared :class:`TimeFormat`.

One value (:func:`to_ms`, what the decoder's exact classifier uses) or a column of them
(:func:`column_to_ms`, the fast path's: numpy arithmetic for the epoch formats). Both say the
same: an int of milliseconds, or None when the value does not read in its format.

- ``epoch_s``: an integer or a fraction of seconds (rounded to the nearest millisecond);
  ``epoch_ms``, ``epoch_us``, ``epoch_ns``: an integer (finer units floored to milliseconds).
- ``iso8601``: ``YYYY-MM-DD``, ``T`` (or ``t`` or a space), ``HH:MM:SS``, an optional fraction
  of 1 to 9 digits (floored to milliseconds), then ``Z`` (or ``z``) or an offset ``+HH:MM``
  (or ``+HHMM``). A time without a zone is refused: it would be read in some zone silently.
- ``pattern``: :func:`datetime.strptime` with the declared pattern; without ``%z`` in it the
  time is read in the declared IANA zone (an ambiguous or skipped local time follows
  :mod:`zoneinfo`'s ``fold=0``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from pipelines.events.declaration import TimeFormat

__all__ = ["INTEGER_FORMATS", "UNIT_MS", "column_to_ms", "to_ms"]

UNIT_MS = {
    TimeFormat.EPOCH_S: 1000,
    TimeFormat.EPOCH_MS: 1,
    TimeFormat.EPOCH_US: 1 / 1000,
    TimeFormat.EPOCH_NS: 1 / 1_000_000,
}
"""Milliseconds per unit of each epoch format."""

INTEGER_FORMATS = (TimeFormat.EPOCH_MS, TimeFormat.EPOCH_US, TimeFormat.EPOCH_NS)
"""Epoch formats whose values must be integers (epoch_s takes fractions too)."""

_DIVISOR = {TimeFormat.EPOCH_MS: 1, TimeFormat.EPOCH_US: 1000, TimeFormat.EPOCH_NS: 1_000_000}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d\d):?(\d\d))",
    re.ASCII,
)


def _iso_ms(text: str) -> int | None:
    match = _ISO.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, z, sign, oh, om = match.groups()
    try:
        naive = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
    except ValueError:  # no such date or time
        return None
    offset = 0
    if z is None:
        if int(oh) > 23 or int(om) > 59:
            return None
        offset = (int(oh) * 60 + int(om)) * (1 if sign == "+" else -1)
    whole = (naive - _EPOCH.replace(tzinfo=None)) // _MS - offset * 60_000
    return whole + (int((fraction + "00")[:3]) if fraction else 0)


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _pattern_ms(text: str, pattern: str, zone: str) -> int | None:
    try:
        parsed = datetime.strptime(text, pattern)
    except (ValueError, OverflowError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_zone(zone))
    try:
        return (parsed - _EPOCH) // _MS
    except OverflowError:
        return None


def to_ms(value: Any, fmt: TimeFormat, pattern: str | None = None, zone: str = "UTC") -> int | None:
    """``value`` (as JSON decodes it) read in ``fmt`` as epoch milliseconds, or None."""
    kind = type(value)
    if fmt in INTEGER_FORMATS:
        return value // _DIVISOR[fmt] if kind is int else None
    if fmt is TimeFormat.EPOCH_S:
        if kind is int:
            return value * 1000
        if kind is float:
            try:
                return round(value * 1000)
            except (OverflowError, ValueError):  # inf, nan
                return None
        return None
    if kind is not str:
        return None
    if fmt is TimeFormat.ISO8601:
        return _iso_ms(value)
    return _pattern_ms(value, pattern or "", zone)


def column_to_ms(
    values: list[Any], fmt: TimeFormat, pattern: str | None = None, zone: str = "UTC"
) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` (of the format's JSON type, as the fast path typed them) as int64 epoch
    milliseconds, and a mask of those that do not read (None when all do); the masked entries
    hold 0."""
    if fmt in INTEGER_FORMATS:
        column = np.array(values, dtype=np.int64)  # the fast path bounded them to int64
        divisor = _DIVISOR[fmt]
        return (column // divisor if divisor != 1 else column), None
    if fmt is TimeFormat.EPOCH_S:
        column = np.array(values, dtype=np.float64)
        exact = [type(v) is int for v in values]
        ms = np.rint(column * 1000)
        if any(exact):  # integers of seconds: exact even past float64's 53 bits
            ints = np.flatnonzero(exact)
            out = np.zeros(len(values), dtype=np.int64)
            floats = ~np.asarray(exact)
            out[floats] = ms[floats]
            out[ints] = np.array([values[i] for i in ints], dtype=np.int64) * 1000
            return out, None
        return ms.astype(np.int64), None
    parsed = [to_ms(v, fmt, pattern, zone) for v in values]
    if None in parsed:
        bad = np.array([p is None for p in parsed])
        return np.array([0 if p is None else p for p in parsed], dtype=np.int64), bad
    return np.array(parsed, dtype=np.int64), None
