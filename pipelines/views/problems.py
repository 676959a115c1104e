"""Pydantic's errors of a views file in Sluice's words: one line per mistake, with its path.

The path reads as users have always seen it, ``views[0] (traffic_by_org).aggregation_info[1]
.aggregation``: the union's tag is dropped, and a view with a valid name is named. Pydantic's
own messages for what the field types do not word themselves (a missing key, unknown keys, an
unknown ``kind``, an entry that is not a mapping) are rewritten here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from pipelines.aggregators import names
from pipelines.views.aggregation_info import UNKNOWN_AGGREGATION, AggregationDefinition
from pipelines.views.definitions import VIEW_MODELS, allowed_keys
from pipelines.views.fields import DURATION_HINT, VIEW_DEFINITION, is_name
from pipelines.views.model import VIEW_KINDS

__all__ = ["Problem", "describe"]

_NAME_RULE = "lower-case letters, digits and _"
_REQUIRED = {
    "name": f"a view name is required ({_NAME_RULE}, starting with a letter)",
    "topic": "a topic name is required",
    "interval": f"a window is required; {DURATION_HINT}",
    "aggregation_info": "expected a non-empty list",
    "aggregated_col_name": f"an output column name is required ({_NAME_RULE})",
}


@dataclass(frozen=True)
class Problem:
    """One mistake: where it is (``views[0] (a).interval``) and what is wrong."""

    where: str
    message: str
    unknown_aggregation: bool = False

    def line(self, source: str) -> str:
        """``views.yaml: views[0] (a).interval: ...``; a file-wide problem has no path."""
        return (
            f"{source}: {self.where}: {self.message}" if self.where else f"{source}: {self.message}"
        )


def describe(error: ValidationError, views: Sequence[Any]) -> list[Problem]:
    """The problems of ``error``, raised validating ``{"views": views}``, in the file's order;
    the unknown keys of one mapping are one problem."""
    details = error.errors()
    extra: dict[tuple, list[str]] = {}
    for detail in details:
        if detail["type"] == "extra_forbidden":
            extra.setdefault(tuple(detail["loc"][:-1]), []).append(str(detail["loc"][-1]))
    problems: list[Problem] = []
    for detail in details:
        loc = tuple(detail["loc"])
        if detail["type"] != "extra_forbidden":
            problems.append(_problem(detail, loc, views))
        elif loc[:-1] in extra:
            problems.append(_unknown_keys(loc[:-1], extra.pop(loc[:-1]), views))
    return problems


def _problem(detail: ErrorDetails, loc: tuple, views: Sequence[Any]) -> Problem:
    kind, ctx, value = detail["type"], detail.get("ctx") or {}, detail.get("input")
    if kind in (VIEW_DEFINITION, UNKNOWN_AGGREGATION):
        where = _where(loc, views) + (f".{ctx['field']}" if ctx.get("field") else "")
        return Problem(where, ctx["message"], kind == UNKNOWN_AGGREGATION)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        got = value.get("kind") if isinstance(value, Mapping) else value
        message = f"{got!r} is not a view kind (kinds: {', '.join(VIEW_KINDS)})"
        return Problem(f"{_where(loc, views)}.kind", message)
    if kind == "model_type":
        return Problem(_where(loc, views), f"expected a mapping, got {type(value).__name__}")
    if kind == "missing":
        field = str(loc[-1])
        if field == "aggregation":
            return Problem(
                _where(loc, views),
                f"an aggregation is required (known: {', '.join(names())})",
                unknown_aggregation=True,
            )
        return Problem(_where(loc, views), _REQUIRED.get(field, "required"))
    message = detail["msg"]  # a rule no field type words itself: pydantic's, with the value
    got = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:57]}..."
    return Problem(_where(loc, views), f"{message[0].lower()}{message[1:]} (got {got})")


def _unknown_keys(loc: tuple, keys: list[str], views: Sequence[Any]) -> Problem:
    allowed = allowed_keys(_model_at(loc))
    return Problem(
        _where(loc, views),
        f"unknown key(s) {', '.join(map(repr, sorted(keys)))} (allowed: {', '.join(allowed)})",
    )


def _model_at(loc: tuple) -> type[BaseModel]:
    """The model of the mapping at ``loc``: an aggregation, or a view of the tagged kind."""
    if "aggregation_info" in loc:
        return AggregationDefinition
    return VIEW_MODELS[loc[2]]


def _where(loc: tuple, views: Sequence[Any]) -> str:
    """``('views', 0, 'window', 'aggregation_info', 1, 'col_name')`` ->
    ``views[0] (a).aggregation_info[1].col_name``."""
    text = ""
    for i, part in enumerate(loc):
        if i == 2 and part in VIEW_MODELS:
            continue  # the union's tag
        if isinstance(part, int):
            text += f"[{part}]"
            if i == 1:
                text += _named(views[part] if part < len(views) else None)
        else:
            text += f".{part}" if text else str(part)
    return text


def _named(raw: Any) -> str:
    """`` (name)`` for a view whose name is valid; an invalid name is its own problem."""
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return f" ({name})" if is_name(name) else ""
