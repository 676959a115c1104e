"""``where:`` filters: a small language over event fields, parsed by hand, compiled three ways.

Grammar (keywords in any case)::

    expr    := and_ ("or" and_)*
    and_    := not_ ("and" not_)*
    not_    := "not" not_ | "(" expr ")" | test
    test    := FIELD OP literal | FIELD ["not"] "in" "(" literal ("," literal)* ")"
             | FIELD "is" ["not"] "null"
    OP      := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    literal := number | 'text' | "text" | true | false   (a quote inside doubles: 'it''s')

A filter is parsed once into a tree and never evaluated as Python. The tree compiles to a
numpy mask for the stream (:meth:`Filter.mask`), a Spark column for the correction
(:meth:`Filter.spark`) and DuckDB SQL for the reconciliation's causes (:meth:`Filter.sql`).
Fields are checked against the event schema and literals against the field's type, so a
mistake is an error naming the position, never a filter that silently matches nothing. SQL's
rule holds everywhere: a comparison with a null is not true. In a numpy column a null is None
(or NaN); the stream hands a filter a nullable long, double or boolean column with nulls as
an object array holding None there (:func:`pipelines.aggregators.nulls.with_nulls`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipelines.events.column_types import ColumnType
from pipelines.exceptions import ViewDefinitionError
from pipelines.expressions.tokens import KEYWORDS as _KEYWORDS
from pipelines.expressions.tokens import Token as _Token
from pipelines.expressions.tokens import shown as _shown
from pipelines.expressions.tokens import tokenize

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["Filter", "FilterError", "parse_filter"]

MAX_LENGTH = 2000
"""Longest filter text: enough for a long ``in`` list, short enough to parse in microseconds."""
MAX_DEPTH = 32
"""Deepest nesting of parentheses and ``not``: the parser recurses once per level."""


class FilterError(ViewDefinitionError):
    """A ``where:`` text is not a valid filter; the message says what and where."""


@dataclass(frozen=True)
class _Compare:
    field: str
    op: str
    value: Any


@dataclass(frozen=True)
class _In:
    field: str
    values: tuple
    negated: bool


@dataclass(frozen=True)
class _IsNull:
    field: str
    negated: bool


@dataclass(frozen=True)
class _Not:
    inner: Any


@dataclass(frozen=True)
class _Bool:
    op: str  # and, or
    parts: tuple


def _tokens(text: str) -> list[_Token]:
    return tokenize(text, FilterError)


class _Parser:
    def __init__(self, text: str, columns: Mapping[str, ColumnType] | None) -> None:
        self.columns = columns
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token.kind == "word" and token.value == word:
            self.i += 1
            return True
        return False

    def expect(self, what: str, ok: bool, token: _Token) -> None:
        if not ok:
            found = "the end" if token.kind == "end" else _shown(token)
            raise FilterError(f"expected {what} at {token.at + 1}, found {found}")

    def parse(self) -> Any:
        tree = self.or_()
        token = self.peek()
        self.expect("and, or or the end", token.kind == "end", token)
        return tree

    def or_(self) -> Any:
        parts = [self.and_()]
        while self.keyword("or"):
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else _Bool("or", tuple(parts))

    def and_(self) -> Any:
        parts = [self.not_()]
        while self.keyword("and"):
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else _Bool("and", tuple(parts))

    def not_(self) -> Any:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"nested deeper than {MAX_DEPTH} levels at {self.peek().at + 1}")
        try:
            if self.keyword("not"):
                return _Not(self.not_())
            token = self.peek()
            if token.kind == "punct" and token.value == "(":
                self.take()
                inner = self.or_()
                close = self.take()
                self.expect("')'", close.kind == "punct" and close.value == ")", close)
                return inner
            return self.test()
        finally:
            self.depth -= 1

    def test(self) -> Any:
        token = self.take()
        is_field = token.kind == "word" and token.value not in _KEYWORDS
        self.expect("an event field", is_field, token)
        field = _field(token, self.columns)
        nxt = self.take()
        if nxt.kind == "op":
            return _Compare(field, nxt.value, self.literal(field))
        if nxt.kind == "word" and nxt.value == "is":
            negated = self.keyword("not")
            null = self.take()
            self.expect("null", null.kind == "word" and null.value == "null", null)
            return _IsNull(field, negated)
        negated = nxt.kind == "word" and nxt.value == "not"
        if negated:
            nxt = self.take()
        self.expect(
            "a comparison (=, !=, <, <=, >, >=), in, not in or is [not] null",
            nxt.kind == "word" and nxt.value == "in",
            nxt,
        )
        opening = self.take()
        self.expect("'(' after in", opening.kind == "punct" and opening.value == "(", opening)
        values = [self.literal(field)]
        while True:
            sep = self.take()
            if sep.kind == "punct" and sep.value == ")":
                return _In(field, tuple(values), negated)
            self.expect("',' or ')'", sep.kind == "punct" and sep.value == ",", sep)
            values.append(self.literal(field))

    def literal(self, field: str) -> Any:
        token = self.take()
        declared = None if self.columns is None else self.columns[field]
        truth = token.kind == "word" and str(token.value).lower() in ("true", "false")
        if truth and declared in (None, ColumnType.BOOLEAN):
            return str(token.value).lower() == "true"
        if self.columns is None:  # untyped: the literal as written
            if token.kind in ("number", "text"):
                return token.value
            self.expect("a number, a quoted string, true or false", False, token)
        if declared is ColumnType.BOOLEAN:
            self.expect("true or false", token.kind in ("number", "text", "word"), token)
            raise FilterError(
                f"{field} is a boolean: compare it with true or false, not {_shown(token)} "
                f"(at {token.at + 1})"
            )
        numeric = declared is not ColumnType.STRING  # long, double, timestamp (epoch ms)
        if token.kind == "number" and numeric:
            return token.value
        if token.kind == "text" and not numeric:
            return token.value
        if token.kind in ("number", "text"):
            want = "a number" if numeric else "a quoted string"
            kind = "a number" if numeric else "a string"
            raise FilterError(
                f"{field} is {kind}: compare it with {want}, not {_shown(token)} "
                f"(at {token.at + 1})"
            )
        self.expect("a number or a quoted string", False, token)
        raise AssertionError  # expect raised


def _field(token: _Token, columns: Mapping[str, ColumnType] | None) -> str:
    name = token.value
    if columns is not None and name not in columns:
        raise FilterError(
            f"unknown field {name!r} at {token.at + 1} (event fields: {', '.join(columns)})"
        )
    return name


def parse_filter(text: Any, columns: Mapping[str, ColumnType] | None = None) -> Filter:
    """The filter ``text`` means, or a :class:`FilterError` saying what is wrong and where.

    ``columns`` are the declared columns of the view's topic (name -> type): a field must be
    one of them and a literal must fit its type. Without them (an aggregator's own ``where:``,
    already checked with its view's declaration) the literals are taken as written."""
    if not isinstance(text, str) or not text.strip():
        raise FilterError(f"expected a filter such as \"event_type = 'error'\", got {text!r}")
    if len(text) > MAX_LENGTH:
        raise FilterError(f"{len(text)} characters; a filter has at most {MAX_LENGTH}")
    return Filter(text, _Parser(text, columns).parse())


# --- the three compilations -------------------------------------------------------------------

_NUMPY_COMPARE = {
    "=": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def _is_null(values: np.ndarray) -> np.ndarray:
    if values.dtype == object:
        return pd.isna(values)
    if values.dtype.kind == "f":
        return np.isnan(values)
    return np.zeros(len(values), dtype=bool)


def _mask(node: Any, columns: dict[str, np.ndarray]) -> np.ndarray:
    if isinstance(node, _Bool):
        masks = [_mask(p, columns) for p in node.parts]
        combine = np.logical_and if node.op == "and" else np.logical_or
        out = masks[0]
        for m in masks[1:]:
            out = combine(out, m)
        return out
    if isinstance(node, _Not):
        inner = node.inner
        # not (null comparison) stays not true, as in SQL: only a defined test can be negated
        return ~_mask(inner, columns) & _defined(inner, columns)
    values = columns[node.field]
    if isinstance(node, _IsNull):
        null = _is_null(values)
        return ~null if node.negated else null
    defined = ~_is_null(values)
    if isinstance(node, _In):
        if values.dtype == object:
            hit = pd.Series(values, copy=False).isin(node.values).to_numpy()
        else:
            hit = np.isin(values, np.array(node.values))
        return (~hit if node.negated else hit) & defined
    if values.dtype == object:
        if node.op in ("=", "!="):  # the common case, vectorised
            eq = values == node.value
            return (eq if node.op == "=" else ~eq) & defined
        compare = _NUMPY_COMPARE[node.op]
        return np.fromiter(
            (v is not None and bool(compare(v, node.value)) for v in values),
            dtype=bool,
            count=len(values),
        )
    return np.asarray(_NUMPY_COMPARE[node.op](values, node.value)) & defined


def _defined(node: Any, columns: dict[str, np.ndarray]) -> np.ndarray:
    """Where ``node`` is true or false, not unknown (SQL's three-valued logic)."""
    if isinstance(node, _IsNull):
        return np.ones(len(columns[node.field]), dtype=bool)
    if isinstance(node, _Compare | _In):
        return ~_is_null(columns[node.field])
    if isinstance(node, _Not):
        return _defined(node.inner, columns)
    parts = [(_mask(p, columns), _defined(p, columns)) for p in node.parts]
    if node.op == "and":  # defined when every part is, or any part is false
        all_defined = np.logical_and.reduce([d for _, d in parts])
        any_false = np.logical_or.reduce([d & ~m for m, d in parts])
        return all_defined | any_false
    all_defined = np.logical_and.reduce([d for _, d in parts])
    any_true = np.logical_or.reduce([m for m, _ in parts])
    return all_defined | any_true


def _spark(node: Any) -> Column:
    from pyspark.sql import functions as F

    if isinstance(node, _Bool):
        out = _spark(node.parts[0])
        for part in node.parts[1:]:
            out = (out & _spark(part)) if node.op == "and" else (out | _spark(part))
        return out
    if isinstance(node, _Not):
        return ~_spark(node.inner)
    col = F.col(node.field)
    if isinstance(node, _IsNull):
        return col.isNotNull() if node.negated else col.isNull()
    if isinstance(node, _In):
        hit = col.isin(list(node.values))
        return ~hit if node.negated else hit
    value = F.lit(node.value)
    return {
        "=": col == value,
        "!=": col != value,
        "<": col < value,
        "<=": col <= value,
        ">": col > value,
        ">=": col >= value,
    }[node.op]


def _sql_literal(value: Any, spark: bool) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        if spark:  # Spark SQL reads backslash escapes in string literals; DuckDB does not
            value = value.replace("\\", "\\\\")
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _sql(node: Any, spark: bool) -> str:
    if isinstance(node, _Bool):
        return "(" + f" {node.op.upper()} ".join(_sql(p, spark) for p in node.parts) + ")"
    if isinstance(node, _Not):
        return f"(NOT {_sql(node.inner, spark)})"
    name = f"`{node.field}`" if spark else f'"{node.field}"'
    if isinstance(node, _IsNull):
        return f"({name} IS {'NOT ' if node.negated else ''}NULL)"
    if isinstance(node, _In):
        listed = ", ".join(_sql_literal(v, spark) for v in node.values)
        return f"({name} {'NOT ' if node.negated else ''}IN ({listed}))"
    op = "<>" if node.op == "!=" else node.op
    return f"({name} {op} {_sql_literal(node.value, spark)})"


def _fields(node: Any) -> set[str]:
    if isinstance(node, _Bool):
        return set().union(*(_fields(p) for p in node.parts))
    if isinstance(node, _Not):
        return _fields(node.inner)
    return {node.field}


@dataclass(frozen=True)
class Filter:
    """A parsed filter: its text, and what it compiles to in each engine."""

    text: str
    tree: Any

    @property
    def fields(self) -> frozenset[str]:
        """The event fields the filter reads."""
        return frozenset(_fields(self.tree))

    def mask(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """Which rows of a decoded batch's ``columns`` pass (numpy, for the stream)."""
        return _mask(self.tree, columns)

    def spark(self) -> Column:
        """The same test as a Spark boolean column (null where SQL says unknown)."""
        return _spark(self.tree)

    def sql(self, spark: bool = False) -> str:
        """The same test as SQL: DuckDB's (the reconciliation's archive reads), or Spark's
        where an aggregate is written as SQL text (``percentile_disc``)."""
        return _sql(self.tree, spark)
