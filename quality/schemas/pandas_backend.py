"""Specs as pandera (pandas) schemas, and validation with messages that quote failing values.

Frames are checked as ``pyarrow.Table.to_pandas`` makes them (strings as ``str`` objects,
timestamps with their unit and zone). pandera is imported on first use: it pulls in pandas
and pyspark.pandas, seconds of start-up that the Dagster code location and the CLI should
not pay until they validate something.
"""

from __future__ import annotations

import warnings
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from quality.schemas.spec import (
    MAX_EXAMPLES,
    FrameSpec,
    Rule,
    RuleKind,
    WindowWidth,
    show,
    violation,
)

if TYPE_CHECKING:
    import pandera.pandas as pdp

__all__ = ["epoch_ms", "pandas_schema", "rule_check", "to_pandas", "validate_frame"]


def epoch_ms(values: pd.Series) -> pd.Series:
    """Epoch milliseconds of integers or timestamps."""
    if isinstance(values.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(values):
        return values.dt.as_unit("ms").astype("int64")
    return values


def _multiple_of(values: pd.Series, *, step: int) -> pd.Series:
    return epoch_ms(values) % step == 0


def _width(frame: pd.DataFrame, *, width: WindowWidth) -> pd.Series:
    return epoch_ms(frame[width.end]) - epoch_ms(frame[width.start]) == width.interval_ms


def rule_check(rule: Rule):
    """The pandera (pandas) check of a rule, labelled so messages name the rule."""
    from pandera.api.checks import Check

    label = rule.label
    match rule.kind:
        case RuleKind.GE:
            return Check.ge(rule.value, error=label)
        case RuleKind.LE:
            return Check.le(rule.value, error=label)
        case RuleKind.LT:
            return Check.lt(rule.value, error=label)
        case RuleKind.ISIN:
            return Check.isin(list(rule.value), error=label)
        case RuleKind.NON_EMPTY:
            return Check.str_length(min_value=1, error=label)
        case RuleKind.MATCHES:
            return Check.str_matches(rule.value, error=label)
        case RuleKind.MULTIPLE_OF:
            return Check(partial(_multiple_of, step=rule.value), error=label)
    raise AssertionError(rule.kind)


def _pandas_dtype(t: pa.DataType) -> Any:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str  # object columns whose values are all str
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return object
    if pa.types.is_timestamp(t):
        return pd.DatetimeTZDtype(t.unit, t.tz) if t.tz else f"datetime64[{t.unit}]"
    return t.to_pandas_dtype()


def _whole(values: pd.Series) -> pd.Series:
    return values % 1 == 0


def _column(c: Any) -> Any:
    """A column's pandera check. A nullable integer column (a long's sum over no value is
    null) arrives as float64 from ``to_pandas`` when it holds a null: its values must then be
    whole numbers rather than of dtype int64."""
    import pandera.pandas as pdp

    checks = [rule_check(r) for r in c.rules]
    if c.nullable and pa.types.is_integer(c.type):
        checks.append(pdp.Check(_whole, error="is an integer"))
        return pdp.Column(None, checks, nullable=True)
    return pdp.Column(_pandas_dtype(c.type), checks, nullable=c.nullable)


@lru_cache(maxsize=128)
def pandas_schema(spec: FrameSpec) -> pdp.DataFrameSchema:
    """The pandera schema of ``spec`` for frames as ``pyarrow.Table.to_pandas`` makes them."""
    import pandera.pandas as pdp

    columns = {c.name: _column(c) for c in spec.columns}
    checks = []
    if spec.width is not None:
        checks.append(pdp.Check(partial(_width, width=spec.width), error=spec.width.label))
    return pdp.DataFrameSchema(
        columns, checks=checks, unique=list(spec.unique) or None, strict=True, name=spec.name
    )


def _examples(values: list[Any]) -> str:
    distinct = list(dict.fromkeys(show(v) for v in values))
    more = ", ..." if len(distinct) > MAX_EXAMPLES else ""
    return ", ".join(distinct[:MAX_EXAMPLES]) + more


def _row_tuples(cases: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """Failure cases reported column by column, put back together per row."""
    rows: dict[Any, dict[str, Any]] = {}
    for index, column, value in cases[["index", "column", "failure_case"]].itertuples(index=False):
        rows.setdefault(index, {})[column] = value
    return [tuple(row.get(c) for c in columns) for row in rows.values()]


def describe_pandas_failures(spec: FrameSpec, cases: pd.DataFrame) -> list[str]:
    """One line per (column, check) of pandera's ``failure_cases``, with a few failing values."""
    problems = []
    checks = cases["check"].astype(str)
    mistyped = set(cases.loc[checks.str.startswith("dtype("), "column"])
    for (column, check), group in cases.groupby(["column", "check"], dropna=False, sort=False):
        if check == "multiple_fields_uniqueness":
            continue  # reported per row below
        if column in mistyped and not str(check).startswith("dtype("):
            continue  # value checks of a mistyped column only echo the type error
        if spec.width is not None and check == spec.width.label:
            continue
        values = group["failure_case"].tolist()
        if check == "not_nullable":
            rows = [int(i) if isinstance(i, float) else i for i in group["index"] if pd.notna(i)]
            problems.append(
                f"column {column!r} fails not-null in {len(rows)} row(s), e.g. rows {_examples(rows)}"
            )
        elif str(check).startswith("dtype("):
            problems.append(f"column {column!r} fails {check}: got {_examples(values)}")
        elif check in ("column_in_dataframe", "column_in_schema"):
            what = "is missing" if check == "column_in_dataframe" else "is not in the schema"
            problems.append(f"column {_examples(values)} {what}")
        else:
            problems.append(
                f"column {column!r} fails {str(check)!r} in {len(group)} row(s), "
                f"e.g. {_examples(values)}"
            )
    unique = cases[cases["check"] == "multiple_fields_uniqueness"]
    if len(unique):
        keys = _row_tuples(unique, list(spec.unique))
        problems.append(
            f"columns ({', '.join(spec.unique)}) fail 'unique': {len(keys)} row(s) share a key, "
            f"e.g. {_examples(keys)}"
        )
    if spec.width is not None:
        width = cases[cases["check"] == spec.width.label]
        if len(width):
            pairs = _row_tuples(width, [spec.width.start, spec.width.end])
            problems.append(
                f"columns ({spec.width.start}, {spec.width.end}) fail {spec.width.label!r} in "
                f"{len(pairs)} row(s), e.g. {_examples(pairs)}"
            )
    return problems


def to_pandas(data: pa.Table | pd.DataFrame) -> pd.DataFrame:
    if isinstance(data, pa.Table):
        return data.to_pandas()
    if isinstance(data, pd.DataFrame):
        # pandera's uniqueness report needs a unique index; positions name rows in messages
        return data if data.index.is_unique else data.reset_index(drop=True)
    raise TypeError(f"expected a pyarrow Table or pandas DataFrame, got {type(data).__name__}")


def validate_frame(spec: FrameSpec, data: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Check ``data`` against ``spec``; returns it as pandas, or raises :class:`SchemaViolation`
    listing every problem at once (lazy validation)."""
    from pandera.errors import SchemaErrors

    frame = to_pandas(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pandera's own concat of cases
            return pandas_schema(spec).validate(frame, lazy=True)
    except SchemaErrors as exc:
        raise violation(spec, describe_pandas_failures(spec, exc.failure_cases)) from None
