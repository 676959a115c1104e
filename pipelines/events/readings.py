"""One declared value of a topic's messages (a field, or the event time): where it is, its
type, the exact checks of the decoder's classifier, and the type the fast path's msgspec
struct gives it. The rules are the decoder's (:mod:`pipelines.events.declared`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import numpy as np

from pipelines.events.declaration import (
    EVENT_TIME,
    EVENT_TIME_MAX_MS,
    EVENT_TIME_MIN_MS,
    ColumnType,
    FieldDeclaration,
    TimeFormat,
)
from pipelines.events.times import INTEGER_FORMATS, to_ms

__all__ = ["ABSENT", "Bad", "Reading", "field_reading", "follow"]

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
ABSENT = object()
DTYPES = {
    ColumnType.STRING: object,
    ColumnType.LONG: np.int64,
    ColumnType.DOUBLE: np.float64,
    ColumnType.BOOLEAN: np.bool_,
    ColumnType.TIMESTAMP: np.int64,
}
FILL = {ColumnType.LONG: 0, ColumnType.DOUBLE: 0.0, ColumnType.BOOLEAN: False}


@dataclass(frozen=True)
class Reading:
    """One value read from the body: a declared field, or the event time."""

    name: str
    label: str
    """The path, as details name it."""
    type: ColumnType
    steps: tuple[str | int, ...]
    nullable: bool
    fmt: TimeFormat = TimeFormat.EPOCH_MS
    pattern: str | None = None
    zone: str = "UTC"
    minimum: int | float | None = None
    soft: bool = False
    """A type error makes it null (``on_type_error: null``) instead of refusing the message."""

    @property
    def event_time(self) -> bool:
        return self.name == EVENT_TIME

    # --- the exact reading ---------------------------------------------------------------

    def type_problem(self, value: Any) -> str | None:
        kind = type(value)
        t = self.type
        if t is ColumnType.STRING:
            if kind is str and (value or self.nullable):
                return None
            what = "a string" if self.nullable else "a non-empty string"
        elif t is ColumnType.LONG:
            if kind is int:
                return None
            what = "an integer"
        elif t is ColumnType.DOUBLE:
            if kind is int or kind is float:
                return None
            what = "a number"
        elif t is ColumnType.BOOLEAN:
            if kind is bool:
                return None
            what = "true or false"
        else:
            if to_ms(value, self.fmt, self.pattern, self.zone) is not None:
                return None
            what = self._time_words()
        return f"{self.label} must be {what}, got {kind.__name__} {value!r:.40}"

    def _time_words(self) -> str:
        if self.fmt in INTEGER_FORMATS:
            return "an integer" if self.event_time else f"an integer ({self.fmt.value})"
        if self.fmt is TimeFormat.EPOCH_S:
            return "a number (epoch_s)"
        if self.fmt is TimeFormat.ISO8601:
            return "an ISO-8601 time with Z or an offset"
        return f"a time like {self.pattern!r}"

    def range_problem(self, value: Any) -> str | None:
        """(Its type is right.)"""
        if self.type is ColumnType.LONG:
            low = LONG_MIN if self.minimum is None else self.minimum
            if value < low:
                return f"{self.label} {str(value)[:40]} < {low}"
            if value > LONG_MAX:
                return f"{self.label} {str(value)[:40]} > {LONG_MAX}"
        elif self.type is ColumnType.DOUBLE:
            if self.minimum is not None and value < self.minimum:
                return f"{self.label} {str(value)[:40]} < {self.minimum}"
        elif self.type is ColumnType.TIMESTAMP:
            ms = to_ms(value, self.fmt, self.pattern, self.zone)
            if not EVENT_TIME_MIN_MS <= ms < EVENT_TIME_MAX_MS:  # type: ignore[operator]
                bounds = f"[{EVENT_TIME_MIN_MS}, {EVENT_TIME_MAX_MS})"
                if self.fmt is TimeFormat.EPOCH_MS:
                    return f"{self.label} {value} outside {bounds}"
                return f"{self.label} {value!r:.40} is {ms} ms, outside {bounds}"
        return None

    def final(self, value: Any) -> Any:
        """A checked value as its column holds it."""
        if value is None:
            return None
        if self.type is ColumnType.TIMESTAMP:
            return to_ms(value, self.fmt, self.pattern, self.zone)
        if self.type is ColumnType.DOUBLE:
            return float(value)
        return value

    # --- the fast path's type ------------------------------------------------------------

    def struct_type(self) -> Any:
        t = self.type
        if t is ColumnType.STRING:
            kind: Any = str if self.nullable else Annotated[str, msgspec.Meta(min_length=1)]
        elif t is ColumnType.LONG:
            low = LONG_MIN if self.minimum is None else max(LONG_MIN, math.ceil(self.minimum))
            kind = Annotated[int, msgspec.Meta(ge=low, le=LONG_MAX)]
        elif t is ColumnType.DOUBLE:
            kind = float
            if self.minimum is not None:
                kind = Annotated[float, msgspec.Meta(ge=self.minimum)]
        elif t is ColumnType.BOOLEAN:
            kind = bool
        elif self.fmt in INTEGER_FORMATS:
            unit = {TimeFormat.EPOCH_MS: 1, TimeFormat.EPOCH_US: 1000}.get(self.fmt, 1_000_000)
            kind = Annotated[
                int, msgspec.Meta(ge=EVENT_TIME_MIN_MS * unit, lt=EVENT_TIME_MAX_MS * unit)
            ]
        elif self.fmt is TimeFormat.EPOCH_S:
            lo, hi = EVENT_TIME_MIN_MS // 1000, EVENT_TIME_MAX_MS // 1000
            kind = (
                Annotated[int, msgspec.Meta(ge=lo, lt=hi)]
                | Annotated[float, msgspec.Meta(ge=lo - 1, le=hi + 1)]  # rounded, then checked
            )
        else:
            kind = str
        return kind | None if self.nullable else kind


class Bad:
    """A path through a value that is not an object (or array): a type problem."""

    __slots__ = ("detail",)

    def __init__(self, detail: str) -> None:
        self.detail = detail


def follow(event: Any, c: Reading) -> Any:
    """The value at ``c``'s path: the value, None, :data:`ABSENT` or a :class:`Bad`."""
    here = event
    walked = ""
    for step in c.steps:
        if here is None:
            return None if c.nullable else Bad(f"{walked} must be an object, got NoneType None")
        if type(step) is int:
            if type(here) is not list:
                return Bad(f"{walked} must be an array, got {type(here).__name__} {here!r:.40}")
            if step >= len(here):
                return ABSENT
            here = here[step]
            walked += f"[{step}]"
        else:
            if type(here) is not dict:
                return Bad(f"{walked} must be an object, got {type(here).__name__} {here!r:.40}")
            if step not in here:
                return ABSENT
            here = here[step]
            walked = f"{walked}.{step}" if walked else step
    return here


def field_reading(f: FieldDeclaration, soft: bool) -> Reading:
    fmt = f.format or TimeFormat.EPOCH_MS
    return Reading(
        f.name,
        f.path or f.name,
        f.type,
        f.steps,
        f.nullable,
        fmt,
        getattr(f, "pattern", None),
        getattr(f, "zone", "UTC"),
        getattr(f, "minimum", None),
        soft,
    )
