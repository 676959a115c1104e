"""The same specs checked on Spark DataFrames with pandera.pyspark, in the correction job.

Each pandera.pyspark column check is a Spark job of its own: with one per rule and column, a
view of a dozen metrics would run dozens of jobs, more than the correction itself. So the
Spark schema keeps to pandera what costs no job (types, no other columns) and folds
every value rule of the spec, not-null included, and the key's uniqueness into a single
frame-level check: one aggregation per key counting each rule's violations, then one over
those rows, in one Spark job (pandera's own ``unique`` was a second one). When it fails,
this module asks Spark for the counts and a few failing values per broken rule, so messages
read like the pandas ones. Callers should pass a small or cached frame (the correction
passes its collected rows as a local frame).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

from pipelines.views.model import View
from quality.schemas.segments import SegmentKind, segment_spec
from quality.schemas.spec import MAX_EXAMPLES, FrameSpec, Rule, RuleKind, show, violation

if TYPE_CHECKING:
    import pandera.pyspark as ps
    from pyspark.sql import Column, DataFrame

__all__ = ["RULES_CHECK", "spark_schema", "validate_spark", "validate_spark_segment", "violating"]

RULES_CHECK = "value rules (not-null, ranges, sets, patterns, window grid and width), unique key"
"""The frame-level check holding every value rule of a spec and its key's uniqueness."""
NOT_NULL = "not-null"


def _epoch_ms(frame: DataFrame, name: str) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    column = F.col(name)
    if isinstance(frame.schema[name].dataType, TimestampType | TimestampNTZType):
        return F.unix_millis(column)
    return column


def violating(rule: Rule, frame: DataFrame, name: str) -> Column:
    """Rows of ``frame`` whose ``name`` breaks ``rule`` (nulls are the not-null rule's)."""
    from pyspark.sql import functions as F

    column = F.col(name)
    match rule.kind:
        case RuleKind.GE:
            return column < F.lit(rule.value)
        case RuleKind.LE:
            return column > F.lit(rule.value)
        case RuleKind.LT:
            return column >= F.lit(rule.value)
        case RuleKind.ISIN:
            return ~column.isin(list(rule.value))
        case RuleKind.NON_EMPTY:
            return F.length(column) < 1
        case RuleKind.MATCHES:
            return ~column.rlike(rule.value)
        case RuleKind.MULTIPLE_OF:
            return _epoch_ms(frame, name) % F.lit(rule.value) != 0
    raise AssertionError(rule.kind)


def _rules(spec: FrameSpec, frame: DataFrame) -> Iterator[tuple[tuple[str, ...], str, Column]]:
    """(columns shown, check label, violation predicate) of every value rule of ``spec``."""
    from pyspark.sql import functions as F

    present = set(frame.columns)
    for column in spec.columns:
        if column.name not in present:
            continue  # pandera reports the missing column
        if not column.nullable:
            yield (column.name,), NOT_NULL, F.col(column.name).isNull()
        for rule in column.rules:
            yield (column.name,), rule.label, violating(rule, frame, column.name)
    width = spec.width
    if width is not None and {width.start, width.end} <= present:
        span = _epoch_ms(frame, width.end) - _epoch_ms(frame, width.start)
        yield (width.start, width.end), width.label, span != F.lit(width.interval_ms)


def _unique_key(spec: FrameSpec, frame: DataFrame) -> list[str]:
    """The key that must be unique, if the frame has all its columns (else pandera reports)."""
    return list(spec.unique) if set(spec.unique) <= set(frame.columns) else []


def _violation_counts(spec: FrameSpec, frame: DataFrame) -> tuple[list[int], int]:
    """How many rows break each rule of :func:`_rules`, and how many keys repeat, in one job.

    With a unique key, the rules are counted per key in the same aggregation that counts
    each key's rows; a second, global aggregation over those (few) rows sums them up.
    """
    from pyspark.sql import functions as F

    rules = list(_rules(spec, frame))
    keys = _unique_key(spec, frame)
    counts = [F.count(F.when(p, 1)).alias(f"r{i}") for i, (_, _, p) in enumerate(rules)]
    if not keys:
        if not rules:
            return [], 0
        row = frame.agg(*counts).first()
        return [int(row[i]) for i in range(len(rules))], 0
    rows = F.count(F.lit(1)).alias("__rows")
    per_key = frame.groupBy(*keys).agg(rows, *counts)
    totals = [F.sum(f"r{i}").alias(f"r{i}") for i in range(len(rules))]
    row = per_key.agg(F.count(F.when(F.col("__rows") > 1, 1)).alias("__repeated"), *totals)
    row = row.first()
    return [int(row[i + 1] or 0) for i in range(len(rules))], int(row[0])


def _rules_hold(frame: DataFrame, *, spec: FrameSpec) -> bool:
    counts, repeated = _violation_counts(spec, frame)
    return not any(counts) and not repeated


@lru_cache(maxsize=128)
def spark_schema(spec: FrameSpec) -> ps.DataFrameSchema:
    """The pandera.pyspark schema of ``spec``; Spark types follow from the pyarrow ones."""
    import pandera.pyspark as ps
    from pyspark.sql.pandas.types import from_arrow_type

    # nullable=True: not-null is one of the folded rules, not a job per column
    columns = {c.name: ps.Column(from_arrow_type(c.type), nullable=True) for c in spec.columns}
    rules = ps.Check(partial(_rules_hold, spec=spec), error=RULES_CHECK)
    # no unique=: pandera's check is a job of its own; the folded check counts repeated keys
    return ps.DataFrameSchema(columns, checks=[rules], strict=True, name=spec.name)


def _examples(rows: list[Any]) -> str:
    values = [tuple(r) if len(r) > 1 else r[0] for r in rows]
    more = ", ..." if len(values) > MAX_EXAMPLES else ""
    return ", ".join(show(v) for v in values[:MAX_EXAMPLES]) + more


def _rule_problems(spec: FrameSpec, frame: DataFrame) -> list[str]:
    problems = []
    rules = list(_rules(spec, frame))
    counts, repeated = _violation_counts(spec, frame)
    if repeated:
        problems.append(_repeated_keys(spec, frame, repeated))
    for (shown, label, predicate), count in zip(rules, counts, strict=True):
        if not count:
            continue
        what = f"column {shown[0]!r}" if len(shown) == 1 else f"columns ({', '.join(shown)})"
        if label == NOT_NULL:
            problems.append(f"{what} fails not-null in {count} row(s)")
            continue
        sample = frame.where(predicate).select(*shown).limit(MAX_EXAMPLES + 1).collect()
        problems.append(f"{what} fails {label!r} in {count} row(s), e.g. {_examples(sample)}")
    return problems


def _repeated_keys(spec: FrameSpec, frame: DataFrame, count: int) -> str:
    from pyspark.sql import functions as F

    keys = list(spec.unique)
    shared = frame.groupBy(*keys).count().where(F.col("count") > 1)
    examples = _examples(shared.select(*keys).limit(MAX_EXAMPLES + 1).collect())
    return f"columns ({', '.join(keys)}) fail 'unique': {count} key(s) repeat, e.g. {examples}"


def _problem(spec: FrameSpec, frame: DataFrame, reason: str, error: dict[str, Any]) -> list[str]:
    name, check = str(error.get("column")), str(error.get("check"))
    if check == RULES_CHECK:
        return _rule_problems(spec, frame)
    return [f"column {name!r} fails {check}: {error.get('error')}"]


def validate_spark(spec: FrameSpec, frame: DataFrame) -> None:
    """Check a Spark DataFrame against ``spec``; raises :class:`SchemaViolation` naming each
    failing column, check and a few failing values."""
    from pandera.config import ValidationDepth, config_context

    with config_context(validation_enabled=True, validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        checked = spark_schema(spec).validate(frame, lazy=True)
    errors = dict(checked.pandera.errors or {})
    problems = [
        problem
        for category in errors.values()
        for reason, entries in category.items()
        for error in entries
        for problem in _problem(spec, frame, reason, error)
    ]
    if problems:
        raise violation(spec, problems)


def validate_spark_segment(frame: DataFrame, view: View) -> None:
    """``correct_hours(validate_segment=...)``: the correction's rows of ``view`` before they
    are published; a violation stops the view's publication."""
    validate_spark(segment_spec(view, SegmentKind.BATCH), frame)
