"""The value types of a view definition: each checks a raw YAML value and says what is wrong.

A field type is an ``Annotated`` pydantic type: a before-validator words the mistake the way
users have always read it (it runs first, so pydantic's own wording never shows for a value it
refuses), and the inner type and constraints describe the same rule in the JSON Schema editors
use. A check that fails raises :func:`problem`; :mod:`pipelines.views.problems` adds the path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from pipelines.events.schema import EVENT_FIELDS
from pipelines.exceptions import ViewDefinitionError
from pipelines.expressions import FilterError, parse_filter
from pipelines.segments import HOUR_MS
from pipelines.views.model import MAX_KEPT_EVENTS_CAP as MAX_KEPT

__all__ = [
    "DURATION_PATTERN",
    "EVENT_COLUMNS",
    "GROUP_COLUMNS",
    "NAME_PATTERN",
    "NUMERIC_COLUMNS",
    "STRING_COLUMNS",
    "ColumnList",
    "DefinitionModel",
    "DurationMs",
    "GroupColumns",
    "KeptColumns",
    "KeptEventsCap",
    "OutputName",
    "SessionKey",
    "Switch",
    "Text",
    "Topic",
    "ViewName",
    "WhereText",
    "check_duration",
    "is_name",
    "parse_duration",
    "problem",
]

VIEW_DEFINITION = "view_definition"
"""The pydantic error type of every check here (``unknown_aggregation`` for that one)."""

DURATION_PATTERN = r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$"
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"
_DURATION = re.compile(DURATION_PATTERN)
_NAME = re.compile(NAME_PATTERN)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": HOUR_MS, "d": 86_400_000}
DURATION_HINT = "use a number and a unit, e.g. 30s, 10m, 1h, 1d"

EVENT_COLUMNS = tuple(EVENT_FIELDS)
GROUP_COLUMNS = tuple(c for c in EVENT_FIELDS if c != "event_time")
"""Columns a view may group by or keep: every event field but the event time."""
STRING_COLUMNS = tuple(c for c, f in EVENT_FIELDS.items() if not f.numeric)
NUMERIC_COLUMNS = tuple(c for c, f in EVENT_FIELDS.items() if f.numeric)


class DefinitionModel(BaseModel):
    """Base of every definition model: unknown keys are mistakes, and a checked definition
    does not change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def problem(message: str, field: str | None = None, kind: str = VIEW_DEFINITION) -> Exception:
    """The error a check raises; ``field`` extends the path (``params.k``) when the check sits
    on an enclosing value."""
    return PydanticCustomError(kind, "{message}", {"message": message, "field": field})


def is_name(value: Any) -> bool:
    """A valid view or column name: lower-case letters, digits and _, starting with a letter."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_duration(text: Any) -> int:
    """``"10m"`` -> 600000 ms, or a :func:`problem` naming the bad value."""
    match = _DURATION.match(str(text)) if isinstance(text, str | int) else None
    if not match:
        raise problem(f"bad duration {text!r}; {DURATION_HINT}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def parse_duration(text: Any, where: str) -> int:
    """``"10m"`` -> 600000 ms; the error names ``where`` and the bad value."""
    try:
        return check_duration(text)
    except PydanticCustomError as exc:
        raise ViewDefinitionError(f"{where}: {(exc.context or {})['message']}") from None


def _name(what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not is_name(value):
            raise problem(f"{value!r} must be lower-case letters, digits and _{what}")
        return value

    return check


def _columns(unknown_note: str) -> Callable[[Any], Any]:
    """A list of distinct event columns other than the event time."""

    def check(value: Any) -> Any:
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise problem("expected a list of column names")
        for col in value:
            if col not in GROUP_COLUMNS:
                raise problem(
                    f"unknown column {col!r} (event columns: {', '.join(GROUP_COLUMNS)}"
                    f"{unknown_note})"
                )
        if len(set(value)) != len(value):
            raise problem(f"{value} repeats a column")
        return tuple(value)

    return check


DurationMs = Annotated[
    int,
    BeforeValidator(check_duration),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "examples": ["30s", "10m"]}),
]
"""A duration written as a number and a unit (ms, s, m, h, d), held in milliseconds."""

# Constraints come before the validator: after it, the JSON Schema would lose them.
ViewName = Annotated[
    str, Field(pattern=NAME_PATTERN), BeforeValidator(_name(", starting with a letter"))
]
OutputName = Annotated[str, Field(pattern=NAME_PATTERN), BeforeValidator(_name(""))]

GroupColumn = Literal[GROUP_COLUMNS]  # type: ignore[valid-type]
ColumnList = tuple[GroupColumn, ...]
_UNIQUE = Field(json_schema_extra={"uniqueItems": True})
GroupColumns = Annotated[ColumnList, _UNIQUE, BeforeValidator(_columns(""))]
KeptColumns = Annotated[
    ColumnList, _UNIQUE, BeforeValidator(_columns("; the event time is always kept"))
]


def _topic(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise problem("a topic name is required")
    return value


def _session_key(value: Any) -> Any:
    if value not in STRING_COLUMNS:
        raise problem(
            f"{value!r} is not a string event column (use one of: {', '.join(STRING_COLUMNS)})"
        )
    return value


def _kept_events_cap(value: Any) -> Any:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_KEPT:
        raise problem(f"{value!r} must be an integer in [1, {MAX_KEPT}]")
    return value


def _text(value: Any) -> str:
    """Descriptions were always taken as text, whatever YAML made of them."""
    return "" if value is None else str(value)


def _switch(value: Any) -> Any:
    return False if value is None else value


Topic = Annotated[str, Field(min_length=1), BeforeValidator(_topic)]
SessionKey = Annotated[Literal[STRING_COLUMNS], BeforeValidator(_session_key)]  # type: ignore[valid-type]
KeptEventsCap = Annotated[int, Field(ge=1, le=MAX_KEPT), BeforeValidator(_kept_events_cap)]
Text = Annotated[str, BeforeValidator(_text)]
Switch = Annotated[bool, BeforeValidator(_switch)]


def _where(value: Any) -> Any:
    """A filter that parses, with the parser's message (what and at which character)."""
    try:
        parse_filter(value)
    except FilterError as exc:
        raise problem(str(exc)) from None
    return value


WhereText = Annotated[
    str,
    BeforeValidator(_where),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "examples": ["event_type = 'error' and bytes_tx > 0"]}
    ),
]
"""A ``where:`` filter (:mod:`pipelines.expressions`): comparisons, in, and/or/not, is null."""
