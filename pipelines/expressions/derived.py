"""Derived columns: a column computed from a topic's other columns by a small expression, the
same in the stream (numpy), the correction (Spark) and the reconciliation (DuckDB SQL).

A topic declares them under ``derived:``, each a name and an expression in the words of the
``where:`` filters (the same tokens: names, numbers, quoted text)::

    expr := FUNCTION "(" expr ("," expr)* ")" | COLUMN | literal

=====================  ==================================  =====================================
function               takes                               gives
=====================  ==================================  =====================================
``lower(s)``           a string                            the string in lower case
``upper(s)``           a string                            the string in upper case
``coalesce(a, b, …)``  values of one type (long and        the first that is not null
                       double mix as double; a number
                       fits a timestamp: epoch ms)
``hour(t)``            a timestamp                         its hour of day, UTC: long 0-23
``weekday(t)``         a timestamp                         its ISO weekday, UTC: long, 1 =
                                                           Monday … 7 = Sunday
``abs(x)``             a long or double                    its absolute value, same type
=====================  ==================================  =====================================

The result's type is inferred. Nulls propagate as in SQL: a function of a null is null, except
``coalesce``; a derived column may be null only where its inputs may be. A name, function or
type that does not fit is an error naming it and its position, never a column of nulls.

Case mapping is Unicode's full mapping (Python's ``str.lower``, Java's in Spark); DuckDB maps
one character to one, so the few characters whose mapping is longer (``ß`` -> ``SS``, ``İ``)
differ there. Timestamps are epoch milliseconds, so ``hour`` and ``weekday`` are integer
arithmetic in every engine (no time zone setting can change them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipelines.events.column_types import ColumnType
from pipelines.exceptions import ViewDefinitionError
from pipelines.expressions.tokens import KEYWORDS, Token, shown, tokenize

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn

__all__ = [
    "FUNCTIONS",
    "Call",
    "Column",
    "Derived",
    "ExpressionError",
    "Literal",
    "derive",
    "parse_derived",
    "stored_columns",
    "used_derived",
]

MAX_LENGTH = 2000
"""Longest expression text."""
MAX_DEPTH = 32
"""Deepest nesting of calls: the parser recurses once per level."""

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
_EPOCH_WEEKDAY = 3
"""1970-01-01 was a Thursday: ISO weekday 4, i.e. 3 days after Monday."""

FUNCTIONS = ("abs", "coalesce", "hour", "lower", "upper", "weekday")
"""The functions an expression may call."""


class ExpressionError(ViewDefinitionError):
    """A derived column's expression is not valid; the message says what and where."""


@dataclass(frozen=True)
class Column:
    """A declared (or earlier derived) column."""

    name: str
    type: ColumnType
    nullable: bool


@dataclass(frozen=True)
class Literal:
    value: Any
    type: ColumnType
    nullable: bool = False


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Any, ...]
    type: ColumnType
    nullable: bool


Node = Column | Literal | Call


@dataclass(frozen=True)
class Derived:
    """A parsed derived column: its name, text, tree and inferred type."""

    name: str
    text: str
    tree: Node

    @property
    def type(self) -> ColumnType:
        return self.tree.type

    @property
    def nullable(self) -> bool:
        return self.tree.nullable

    @property
    def columns(self) -> frozenset[str]:
        """The columns the expression reads."""
        return frozenset(_columns_of(self.tree))

    def evaluate(
        self, columns: Mapping[str, np.ndarray], nulls: Mapping[str, np.ndarray], n: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The column over ``n`` rows of decoded ``columns`` (strings: None for null; others:
        a value and a mask in ``nulls``), as (values, null mask or None)."""
        values, mask = _evaluate(self.tree, columns, nulls, n)
        return _settled(values, mask, self.type)

    def spark(self) -> SparkColumn:
        """The same computation as a Spark column over the archive's columns."""
        return _spark(self.tree)

    def sql(self) -> str:
        """The same computation as DuckDB SQL over the archive's columns."""
        return _sql(self.tree)


# --- parsing and types ------------------------------------------------------------------------


def _type_name(kind: ColumnType) -> str:
    return "a " + kind.value


class _Parser:
    def __init__(self, text: str, columns: Mapping[str, ColumnType], nullable: frozenset[str]):
        self.columns = columns
        self.nullable = nullable
        self.tokens = tokenize(text, ExpressionError)
        self.i = 0
        self.depth = 0

    def take(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def peek(self) -> Token:
        return self.tokens[self.i]

    def fail(self, what: str, token: Token) -> None:
        found = "the end" if token.kind == "end" else shown(token)
        raise ExpressionError(f"expected {what} at {token.at + 1}, found {found}")

    def parse(self) -> Node:
        tree = self.expr()
        end = self.peek()
        if end.kind != "end":
            self.fail("the end", end)
        return tree

    def expr(self) -> Node:
        token = self.take()
        if token.kind == "number":
            kind = ColumnType.DOUBLE if isinstance(token.value, float) else ColumnType.LONG
            return Literal(token.value, kind)
        if token.kind == "text":
            return Literal(token.value, ColumnType.STRING)
        if token.kind != "word" or token.value in KEYWORDS:
            self.fail("a column, a function or a literal", token)
        nxt = self.peek()
        if nxt.kind == "punct" and nxt.value == "(":
            return self.call(token)
        if token.value not in self.columns:
            raise ExpressionError(
                f"unknown column {token.value!r} at {token.at + 1} "
                f"(columns: {', '.join(self.columns)})"
            )
        name = token.value
        return Column(name, self.columns[name], name in self.nullable)

    def call(self, name: Token) -> Node:
        function = name.value.lower()
        if function not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function {name.value!r} at {name.at + 1} "
                f"(functions: {', '.join(FUNCTIONS)})"
            )
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"nested deeper than {MAX_DEPTH} calls at {name.at + 1}")
        self.take()  # (
        args: list[tuple[Node, Token]] = []
        while True:
            args.append((self.expr(), self.tokens[self.i - 1]))
            sep = self.take()
            if sep.kind == "punct" and sep.value == ")":
                break
            if not (sep.kind == "punct" and sep.value == ","):
                self.fail("',' or ')'", sep)
        self.depth -= 1
        return _typed(function, args, name)


def _argument_problem(function: str, at: Token, node: Node, wanted: str) -> ExpressionError:
    what = f"{node.name} ({node.type.value})" if isinstance(node, Column) else _describe(node)
    return ExpressionError(f"{function} takes {wanted}, not {what} (at {at.at + 1})")


def _describe(node: Node) -> str:
    if isinstance(node, Literal):
        return f"{node.value!r} ({node.type.value})"
    return f"{node.function}(...) ({node.type.value})"


def _typed(function: str, args: list[tuple[Node, Token]], name: Token) -> Call:
    nodes = tuple(node for node, _ in args)
    if function == "coalesce":
        if len(nodes) < 2:
            raise ExpressionError(f"coalesce takes two values or more (at {name.at + 1})")
        return _coalesce(nodes, args, name)
    if len(nodes) != 1:
        raise ExpressionError(f"{function} takes one value, got {len(nodes)} (at {name.at + 1})")
    (arg,), (at,) = nodes, [token for _, token in args]
    if isinstance(arg, Literal):
        raise ExpressionError(f"{function} of a literal is a constant (at {name.at + 1})")
    if function in ("lower", "upper"):
        if arg.type is not ColumnType.STRING:
            raise _argument_problem(function, at, arg, "a string")
        return Call(function, nodes, ColumnType.STRING, arg.nullable)
    if function in ("hour", "weekday"):
        if arg.type is not ColumnType.TIMESTAMP:
            raise _argument_problem(function, at, arg, "a timestamp")
        return Call(function, nodes, ColumnType.LONG, arg.nullable)
    if not arg.type.numeric:  # abs
        raise _argument_problem(function, at, arg, "a long or a double")
    return Call(function, nodes, arg.type, arg.nullable)


def _coalesce(nodes: tuple[Node, ...], args: list[tuple[Node, Token]], name: Token) -> Call:
    """Values of one type; long with double is double; a number literal fits a timestamp."""
    computed = [node for node in nodes if not isinstance(node, Literal)]
    if not computed:
        raise ExpressionError(f"coalesce of literals only is a constant (at {name.at + 1})")
    kinds = {node.type for node in computed}
    numbers = kinds | {node.type for node in nodes if isinstance(node, Literal)}
    if kinds <= {ColumnType.LONG, ColumnType.DOUBLE} and ColumnType.DOUBLE in numbers:
        kinds = {ColumnType.DOUBLE}
    if len(kinds) > 1:
        listed = ", ".join(sorted(kind.value for kind in kinds))
        raise ExpressionError(f"coalesce takes values of one type, got {listed} (at {name.at + 1})")
    (kind,) = kinds
    for node, at in args:
        if isinstance(node, Literal) and not _fits(node.type, kind):
            raise ExpressionError(
                f"coalesce takes values of one type: {_describe(node)} is not "
                f"{_type_name(kind)} (at {at.at + 1})"
            )
    typed = tuple(
        Literal(node.value, kind) if isinstance(node, Literal) else node for node in nodes
    )
    return Call("coalesce", typed, kind, all(node.nullable for node in nodes))


def _fits(literal: ColumnType, kind: ColumnType) -> bool:
    if literal is kind:
        return True
    if literal is ColumnType.LONG:
        return kind in (ColumnType.DOUBLE, ColumnType.TIMESTAMP)
    return False


def parse_derived(
    name: str,
    text: Any,
    columns: Mapping[str, ColumnType],
    nullable: frozenset[str] = frozenset(),
) -> Derived:
    """The derived column ``name`` = ``text`` over ``columns`` (name -> type; ``nullable``:
    those that may be null), or an :class:`ExpressionError` saying what is wrong and where."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError(f'expected an expression such as "lower(merchant)", got {text!r}')
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"{len(text)} characters; an expression has at most {MAX_LENGTH}")
    return Derived(name, text, _Parser(text, columns, nullable).parse())


def stored_columns(derived: Sequence[Derived], columns: Iterable[str]) -> set[str]:
    """``columns`` with each of ``derived`` replaced by the columns it is computed from
    (through earlier derived ones): what to read from the archive to compute them."""
    needed = set(columns)
    for column in reversed(derived):  # a derived column reads only earlier ones
        if column.name in needed:
            needed = (needed - {column.name}) | column.columns
    return needed


def used_derived(derived: Sequence[Derived], columns: Iterable[str]) -> list[Derived]:
    """The derived columns that computing ``columns`` needs (through earlier derived ones),
    in declared order."""
    needed, used = set(columns), []
    for column in reversed(derived):
        if column.name in needed:
            used.append(column)
            needed |= column.columns
    return used[::-1]


def _columns_of(node: Node) -> set[str]:
    if isinstance(node, Column):
        return {node.name}
    if isinstance(node, Call):
        return set().union(*(_columns_of(arg) for arg in node.args))
    return set()


# --- numpy: the stream ------------------------------------------------------------------------

_FILL = {
    ColumnType.LONG: 0,
    ColumnType.TIMESTAMP: 0,
    ColumnType.DOUBLE: 0.0,
    ColumnType.BOOLEAN: False,
}
_DTYPE = {
    ColumnType.STRING: object,
    ColumnType.LONG: np.int64,
    ColumnType.TIMESTAMP: np.int64,
    ColumnType.DOUBLE: np.float64,
    ColumnType.BOOLEAN: np.bool_,
}


def _evaluate(
    node: Node, columns: Mapping[str, np.ndarray], nulls: Mapping[str, np.ndarray], n: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, mask or None): strings may hold None where the mask is set or not."""
    if isinstance(node, Literal):
        return np.full(n, node.value, dtype=_DTYPE[node.type]), None
    if isinstance(node, Column):
        values = columns[node.name]
        if node.type is ColumnType.STRING:
            return values, pd.isna(values) if node.nullable else None
        return values, nulls.get(node.name)
    if node.function == "coalesce":
        return _coalesce_values(node, columns, nulls, n)
    values, mask = _evaluate(node.args[0], columns, nulls, n)
    if node.function in ("lower", "upper"):
        codes, uniques = pd.factorize(values)  # a batch has few distinct values
        method = str.lower if node.function == "lower" else str.upper
        mapped = np.array([method(u) for u in uniques] + [None], dtype=object)
        return mapped[codes], mask  # code -1 (null) takes the trailing None
    if node.function == "hour":
        return np.mod(values, DAY_MS) // HOUR_MS, mask
    if node.function == "weekday":
        return (np.floor_divide(values, DAY_MS) + _EPOCH_WEEKDAY) % 7 + 1, mask
    return np.abs(values), mask  # abs


def _coalesce_values(
    node: Call, columns: Mapping[str, np.ndarray], nulls: Mapping[str, np.ndarray], n: int
) -> tuple[np.ndarray, np.ndarray | None]:
    dtype = _DTYPE[node.type]
    out: np.ndarray | None = None
    missing: np.ndarray | None = None
    for arg in node.args:
        values, mask = _evaluate(arg, columns, nulls, n)
        values = values.astype(dtype, copy=False)
        if out is None:
            out, missing = values.copy(), (None if mask is None else mask.copy())
        elif missing is not None:
            out[missing] = values[missing]
            missing = missing & mask if mask is not None else None
        if missing is None or not missing.any():
            return out, None
    assert out is not None
    return out, missing


def _settled(
    values: np.ndarray, mask: np.ndarray | None, kind: ColumnType
) -> tuple[np.ndarray, np.ndarray | None]:
    """Values as :class:`~pipelines.events.decode.DecodedBatch` holds them: strings None at a
    null, others the type's zero there with the mask (None when no row is null)."""
    values = values.astype(_DTYPE[kind], copy=False)
    if mask is None or not mask.any():
        return values, None
    values = values.copy()
    values[mask] = None if kind is ColumnType.STRING else _FILL[kind]
    return values, mask


def derive(
    derived: Sequence[Derived], columns: dict[str, np.ndarray], nulls: dict[str, np.ndarray]
) -> None:
    """Add each derived column to a decoded batch's ``columns`` (and its mask to ``nulls``
    where a row is null), in declared order, so a later one may read an earlier one."""
    n = len(next(iter(columns.values()))) if columns else 0
    for column in derived:
        values, mask = column.evaluate(columns, nulls, n)
        columns[column.name] = values
        if mask is not None and column.type is not ColumnType.STRING:
            nulls[column.name] = mask
        else:
            nulls.pop(column.name, None)


# --- Spark: the correction --------------------------------------------------------------------

_SPARK_TYPE = {
    ColumnType.STRING: "string",
    ColumnType.LONG: "bigint",
    ColumnType.TIMESTAMP: "bigint",
    ColumnType.DOUBLE: "double",
    ColumnType.BOOLEAN: "boolean",
}


def _spark(node: Node) -> SparkColumn:
    from pyspark.sql import functions as F

    if isinstance(node, Literal):
        return F.lit(node.value).cast(_SPARK_TYPE[node.type])
    if isinstance(node, Column):
        return F.col(node.name)
    args = [_spark(arg) for arg in node.args]
    if node.function == "coalesce":
        return F.coalesce(*(arg.cast(_SPARK_TYPE[node.type]) for arg in args))
    (arg,) = args
    if node.function == "lower":
        return F.lower(arg)
    if node.function == "upper":
        return F.upper(arg)
    if node.function == "hour":
        return F.floor(F.pmod(arg, F.lit(DAY_MS)) / F.lit(HOUR_MS)).cast("bigint")
    if node.function == "weekday":
        days = F.floor((arg - F.pmod(arg, F.lit(DAY_MS))) / F.lit(DAY_MS))
        return (F.pmod(days + F.lit(_EPOCH_WEEKDAY), F.lit(7)) + F.lit(1)).cast("bigint")
    return F.abs(arg)


# --- DuckDB: the reconciliation ---------------------------------------------------------------

_SQL_TYPE = {
    ColumnType.STRING: "VARCHAR",
    ColumnType.LONG: "BIGINT",
    ColumnType.TIMESTAMP: "BIGINT",
    ColumnType.DOUBLE: "DOUBLE",
    ColumnType.BOOLEAN: "BOOLEAN",
}


def _pmod(sql: str, m: int) -> str:
    return f"((({sql}) % {m} + {m}) % {m})"


def _sql(node: Node) -> str:
    if isinstance(node, Literal):
        value = node.value
        text = "'" + value.replace("'", "''") + "'" if isinstance(value, str) else repr(value)
        return f"CAST({text} AS {_SQL_TYPE[node.type]})"
    if isinstance(node, Column):
        return '"' + node.name.replace('"', '""') + '"'
    args = [_sql(arg) for arg in node.args]
    if node.function == "coalesce":
        cast = _SQL_TYPE[node.type]
        return "coalesce(" + ", ".join(f"CAST({a} AS {cast})" for a in args) + ")"
    (arg,) = args
    if node.function in ("lower", "upper", "abs"):
        return f"{node.function}({arg})"
    if node.function == "hour":
        return f"({_pmod(arg, DAY_MS)} // {HOUR_MS})"
    days = f"(({arg}) - {_pmod(arg, DAY_MS)}) // {DAY_MS}"
    return f"({_pmod(f'{days} + {_EPOCH_WEEKDAY}', 7)} + 1)"  # weekday
