"""The value types of a view definition: each checks a raw YAML value and says what is wrong.

A field type is an ``Annotated`` pydantic type: a before-validator words the mistake the way
users have always read it (it runs first, so pydantic's own wording never shows for a value it
refuses), and the inner type and constraints describe the same rule in the JSON Schema editors
use. A check that fails raises :func:`problem`; :mod:`pipelines.views.problems` adds the path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from pipelines.events.declaration import EVENT_TIME, ColumnType, TopicDeclaration
from pipelines.exceptions import ViewDefinitionError
from pipelines.expressions import FilterError, parse_filter
from pipelines.segments import HOUR_MS
from pipelines.views.model import MAX_KEPT_EVENTS_CAP as MAX_KEPT
from pipelines.views.topics import declaration_for

__all__ = [
    "DECLARATIONS",
    "DURATION_PATTERN",
    "NAME_PATTERN",
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
    "declared_columns",
    "is_name",
    "listing",
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

DECLARATIONS = "declarations"
"""The validation context's key of the declarations by topic (the views file's and the topics
file's, :mod:`pipelines.views.topics`); the view's topic validator puts its view's under
:data:`_VIEW_TOPIC`, which the checks of the fields after ``topic`` read."""
_VIEW_TOPIC = "view_topic"


def declared_columns(info: ValidationInfo) -> tuple[str, dict[str, ColumnType]] | None:
    """The topic and declared columns of the view being checked (None when its topic is not
    valid, or no declarations were given: then its columns are not checked)."""
    context = info.context
    if not isinstance(context, dict):
        return None
    declaration: TopicDeclaration | None = context.get(_VIEW_TOPIC)
    return None if declaration is None else (declaration.topic, declaration.columns())


def start_view(info: ValidationInfo) -> None:
    """Forget the previous view's topic: each view's columns are its own topic's."""
    if isinstance(info.context, dict):
        info.context[_VIEW_TOPIC] = None


def listing(topic: str, columns: dict[str, ColumnType], wanted: Callable[[str], bool]) -> str:
    """``columns of topic t: a, b, c``: the names ``wanted`` keeps."""
    names = [c for c in columns if wanted(c)]
    return f"columns of topic {topic!r}: {', '.join(names) or 'none'}"


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


def _columns(unknown_note: str) -> Callable[[Any, ValidationInfo], Any]:
    """A list of distinct declared columns of the view's topic other than the event time."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise problem("expected a list of column names")
        declared = declared_columns(info)
        for col in value:
            if declared is not None and (col not in declared[1] or col == EVENT_TIME):
                topic, columns = declared
                shown = listing(topic, columns, lambda c: c != EVENT_TIME)
                raise problem(f"unknown column {col!r} ({shown}{unknown_note})")
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

ColumnList = tuple[str, ...]
_UNIQUE = Field(json_schema_extra={"uniqueItems": True})
GroupColumns = Annotated[ColumnList, _UNIQUE, BeforeValidator(_columns(""))]
KeptColumns = Annotated[
    ColumnList, _UNIQUE, BeforeValidator(_columns("; the event time is always kept"))
]


def _topic(value: Any, info: ValidationInfo) -> Any:
    """A topic name, declared: the fields after it are checked against its columns."""
    if not isinstance(value, str) or not value:
        raise problem("a topic name is required")
    context = info.context
    if isinstance(context, dict) and context.get(DECLARATIONS) is not None:
        try:
            context[_VIEW_TOPIC] = declaration_for(value, context[DECLARATIONS])
        except ViewDefinitionError as exc:
            raise problem(str(exc)) from None
    return value


def _session_key(value: Any, info: ValidationInfo) -> Any:
    declared = declared_columns(info)
    if declared is None:
        if not isinstance(value, str):
            raise problem(f"{value!r} is not a column name")
        return value
    topic, columns = declared
    if not isinstance(value, str) or columns.get(value) is not ColumnType.STRING:
        strings = listing(topic, columns, lambda c: columns[c] is ColumnType.STRING)
        raise problem(f"{value!r} is not a string column (string {strings})")
    if value in info.context[_VIEW_TOPIC].nullable_columns():
        raise problem(
            f"{value!r} may be null in topic {topic!r}: a session key must be a required "
            "string column (sessions of a null key are not supported yet)"
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
SessionKey = Annotated[str, BeforeValidator(_session_key)]
KeptEventsCap = Annotated[int, Field(ge=1, le=MAX_KEPT), BeforeValidator(_kept_events_cap)]
Text = Annotated[str, BeforeValidator(_text)]
Switch = Annotated[bool, BeforeValidator(_switch)]


def _where(value: Any, info: ValidationInfo) -> Any:
    """A filter that parses over the topic's declared columns, with the parser's message (what
    and at which character)."""
    declared = declared_columns(info)
    try:
        parse_filter(value, None if declared is None else declared[1])
    except FilterError as exc:
        raise problem(str(exc)) from None
    return value


WhereText = Annotated[
    str,
    BeforeValidator(_where),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "examples": ["status = 'failed' and amount > 0"]}
    ),
]
"""A ``where:`` filter (:mod:`pipelines.expressions`): comparisons, in, and/or/not, is null."""
