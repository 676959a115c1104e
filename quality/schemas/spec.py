"""One description per dataset, from which both pandera schemas (pandas and Spark) derive.

A :class:`FrameSpec` says once what a dataset crossing a boundary must look like: each
column's pyarrow type (taken from the writer's own layout), whether it may be null, the
rules its values follow, the key that must be unique and, for query results, the window
width. :mod:`quality.schemas.pandas_backend` and :mod:`quality.schemas.spark` translate it,
so both engines check the same things and word their messages alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import pandas as pd
import pyarrow as pa

from pipelines.views.model import format_duration
from quality.exceptions import SchemaViolation

__all__ = [
    "MAX_EXAMPLES",
    "NON_EMPTY",
    "ColumnSpec",
    "FrameSpec",
    "Rule",
    "RuleKind",
    "WindowWidth",
    "columns_of",
    "ge",
    "isin",
    "le",
    "lt",
    "matches",
    "multiple_of",
    "show",
    "violation",
]

MAX_EXAMPLES = 5
"""Failing values quoted per problem in a violation message."""


class RuleKind(StrEnum):
    GE = "ge"
    LE = "le"
    LT = "lt"
    ISIN = "isin"
    NON_EMPTY = "non_empty"
    MATCHES = "matches"
    MULTIPLE_OF = "multiple_of"


@dataclass(frozen=True)
class Rule:
    """A constraint on every value of one column; ``label`` is how messages name it."""

    kind: RuleKind
    value: Any = None

    @property
    def label(self) -> str:
        match self.kind:
            case RuleKind.GE:
                return f">= {self.value}"
            case RuleKind.LE:
                return f"<= {self.value}"
            case RuleKind.LT:
                return f"< {self.value}"
            case RuleKind.ISIN:
                return f"in {{{', '.join(self.value)}}}"
            case RuleKind.NON_EMPTY:
                return "non-empty"
            case RuleKind.MATCHES:
                return f"matches {self.value}"
            case RuleKind.MULTIPLE_OF:
                return f"multiple of {format_duration(self.value)}"
        raise AssertionError(self.kind)


def ge(value: float) -> Rule:
    return Rule(RuleKind.GE, value)


def le(value: float) -> Rule:
    return Rule(RuleKind.LE, value)


def lt(value: float) -> Rule:
    return Rule(RuleKind.LT, value)


def isin(values: tuple[str, ...]) -> Rule:
    return Rule(RuleKind.ISIN, tuple(values))


def matches(pattern: str) -> Rule:
    return Rule(RuleKind.MATCHES, pattern)


def multiple_of(ms: int) -> Rule:
    """Epoch milliseconds (or timestamps) on a grid of ``ms``: window starts."""
    return Rule(RuleKind.MULTIPLE_OF, ms)


NON_EMPTY = Rule(RuleKind.NON_EMPTY)


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: pa.DataType
    nullable: bool = False
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class WindowWidth:
    """Row rule: ``end - start`` equals the view's interval."""

    start: str
    end: str
    interval_ms: int

    @property
    def label(self) -> str:
        return f"{self.end} - {self.start} == {format_duration(self.interval_ms)}"


@dataclass(frozen=True)
class FrameSpec:
    """What one dataset must look like; no other columns are allowed."""

    name: str
    columns: tuple[ColumnSpec, ...]
    unique: tuple[str, ...] = ()
    width: WindowWidth | None = None

    def column(self, name: str) -> ColumnSpec | None:
        return next((c for c in self.columns if c.name == name), None)


def columns_of(schema: pa.Schema, rules: dict[str, tuple[Rule, ...]]) -> tuple[ColumnSpec, ...]:
    """Column specs from a writer's pyarrow layout plus the rules of each column."""
    return tuple(ColumnSpec(f.name, f.type, f.nullable, rules.get(f.name, ())) for f in schema)


def show(value: Any) -> str:
    """A failing value as messages quote it: repr, but timestamps in ISO 8601."""
    if isinstance(value, tuple):
        return f"({', '.join(show(v) for v in value)})"
    if isinstance(value, pd.Timestamp | datetime):
        return value.isoformat()
    return repr(value.item() if hasattr(value, "item") else value)


def violation(spec: FrameSpec, problems: list[str]) -> SchemaViolation:
    lines = "\n".join(f"  - {p}" for p in problems)
    return SchemaViolation(f"{spec.name} break the schema ({len(problems)} problem(s)):\n{lines}")
