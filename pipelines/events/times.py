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

__all__ = [
    "EPOCH_FORMATS",
    "INTEGER_FORMATS",
    "UNIT_MS",
    "column_to_ms",
    "epoch_format_of",
    "read_time_ms",
    "to_ms",
]

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


_WIDTH = 35
_DIGITS = np.zeros(256, dtype=bool)
_DIGITS[ord("0") : ord("9") + 1] = True
_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _iso_column(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """ISO-8601 strings as epoch ms, in numpy, and which were read: those of the grammar's
    shapes with at most :data:`_WIDTH` ASCII characters (the others, read or not, are left
    to :func:`to_ms`; those read hold the same milliseconds it gives)."""
    n = len(values)
    column = np.zeros(n, dtype=np.int64)
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    if n == 0 or lengths.max() > _WIDTH or lengths.min() < 20:
        return column, np.zeros(n, dtype=bool)
    try:
        raw = np.array(values, dtype=f"S{_WIDTH}")  # ASCII, else refused (UnicodeEncodeError)
    except UnicodeEncodeError:
        return column, np.zeros(n, dtype=bool)
    b = raw.view(np.uint8).reshape(n, _WIDTH).astype(np.int64)
    digit = _DIGITS[b]
    d = b - ord("0")
    rows = np.arange(n)
    ok = digit[:, [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]].all(axis=1)
    ok &= (b[:, 4] == ord("-")) & (b[:, 7] == ord("-")) & (b[:, 13] == ord(":"))
    ok &= (b[:, 16] == ord(":")) & np.isin(b[:, 10], [ord("T"), ord("t"), ord(" ")])
    last = b[rows, lengths - 1]
    sign6 = b[rows, np.maximum(lengths - 6, 0)]
    sign5 = b[rows, np.maximum(lengths - 5, 0)]
    z = (last == ord("Z")) | (last == ord("z"))
    colon = ~z & np.isin(sign6, [ord("+"), ord("-")]) & (b[rows, lengths - 3] == ord(":"))
    compact = ~z & ~colon & np.isin(sign5, [ord("+"), ord("-")])
    zone_len = np.where(z, 1, np.where(colon, 6, 5))
    ok &= z | colon | compact
    end = lengths - zone_len  # the end of the seconds and their fraction
    if not z.all():
        oh_at = end + 1
        om_at = np.where(colon, end + 4, end + 3)
        pos = [oh_at, oh_at + 1, om_at, om_at + 1]
        ok &= z | np.all([digit[rows, np.minimum(p, _WIDTH - 1)] for p in pos], axis=0)
        oh = (
            d[rows, np.minimum(oh_at, _WIDTH - 1)] * 10 + d[rows, np.minimum(oh_at + 1, _WIDTH - 1)]
        )
        om = (
            d[rows, np.minimum(om_at, _WIDTH - 1)] * 10 + d[rows, np.minimum(om_at + 1, _WIDTH - 1)]
        )
        ok &= z | ((oh <= 23) & (om <= 59))
        sign = np.where(np.where(colon, sign6, sign5) == ord("-"), -1, 1)
        offset = np.where(z, 0, sign * (oh * 60 + om))
    else:
        offset = np.zeros(n, dtype=np.int64)
    fraction = end - 20  # digits after the point, if there is one
    no_fraction = end == 19
    ok &= no_fraction | ((b[:, 19] == ord(".")) & (fraction >= 1) & (fraction <= 9))
    cols = np.arange(_WIDTH)
    in_fraction = (cols >= 20) & (cols < end[:, None])
    ok &= (digit | ~in_fraction).all(axis=1)
    ms = np.zeros(n, dtype=np.int64)
    for k, scale in ((20, 100), (21, 10), (22, 1)):
        ms += np.where(~no_fraction & (fraction > k - 20), d[:, k], 0) * scale
    year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    month = d[:, 5] * 10 + d[:, 6]
    day = d[:, 8] * 10 + d[:, 9]
    hour, minute, second = (d[:, k] * 10 + d[:, k + 1] for k in (11, 14, 17))
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_ok = (month >= 1) & (month <= 12)
    days_in = _DAYS[np.where(month_ok, month, 1)] + ((month == 2) & leap)
    ok &= (year >= 1) & month_ok & (day >= 1) & (day <= days_in)
    ok &= (hour <= 23) & (minute <= 59) & (second <= 59)
    days = _days_from_civil(year, np.where(month_ok, month, 1), day)
    column[:] = (
        days * 86_400_000
        + hour * 3_600_000
        + minute * 60_000
        + second * 1000
        + ms
        - offset * 60_000
    )
    column[~ok] = 0
    return column, ok


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
    if fmt is TimeFormat.ISO8601:
        column, read = _iso_column(values)
        if read.all():
            return column, None
        for i in np.flatnonzero(~read).tolist():  # other shapes, or bad: one at a time
            ms = to_ms(values[i], fmt)
            column[i] = 0 if ms is None else ms
            read[i] = ms is not None
        return column, None if read.all() else ~read
    parsed = [to_ms(v, fmt, pattern, zone) for v in values]
    if None in parsed:
        bad = np.array([p is None for p in parsed])
        return np.array([0 if p is None else p for p in parsed], dtype=np.int64), bad
    return np.array(parsed, dtype=np.int64), None


EPOCH_FORMATS = tuple(UNIT_MS)
"""The epoch formats, finest last."""

# Instants from 1990 to 2100 in each unit: a number outside every range is not an epoch time.
_EPOCH_RANGES = {
    TimeFormat.EPOCH_S: (631_152_000, 4_102_444_800),
    TimeFormat.EPOCH_MS: (631_152_000_000, 4_102_444_800_000),
    TimeFormat.EPOCH_US: (631_152_000_000_000, 4_102_444_800_000_000),
    TimeFormat.EPOCH_NS: (631_152_000_000_000_000, 4_102_444_800_000_000_000),
}


def epoch_format_of(value: float) -> TimeFormat | None:
    """The epoch unit a number's magnitude fits (an instant from 1990 to 2100), or None: what
    inference proposes for a numeric time field."""
    for fmt, (low, high) in _EPOCH_RANGES.items():
        if low <= value < high:
            return fmt
    return None


def read_time_ms(
    value: object, fmt: TimeFormat | None, pattern: str | None = None, zone: str = "UTC"
) -> int:
    """``value`` as epoch ms UTC, as inference and the file replay read a time: ``fmt`` None
    reads a number by its magnitude and a string as ISO-8601, and an epoch time may come as a
    string (a CSV cell). Raises ValueError (or TypeError) where :func:`to_ms` reads nothing."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"not a time: {value!r}")
    if fmt is None:
        if isinstance(value, int | float):
            fmt = epoch_format_of(value)
            if fmt is None:
                raise ValueError(f"{value!r} is no epoch time from 1990 to 2100")
        else:
            fmt = TimeFormat.ISO8601
    if fmt in UNIT_MS and isinstance(value, str):
        number = float(value)
        value = int(number) if number.is_integer() and fmt in INTEGER_FORMATS else number
    found = to_ms(value, fmt, pattern, zone)
    if found is None:
        raise ValueError(f"{value!r} does not read as {fmt.value}")
    return found
