"""Per-view schemas of segments and query results, built from the View.

A view's rows take three shapes, one per boundary:

- ``realtime``: a task's partials (``WindowState.segment_table``): window_start in epoch ms,
  the grouping columns, one serialized state per aggregation;
- ``batch``: a correction's exact values (``batch_schema(view)``), in the Spark job before
  publishing and in the published files: window_start, groups, the metric columns;
- ``query``: what ``query_view`` serves: window_start/window_end timestamps, groups, metrics
  and the ``source`` of each row.

All three: one row per (window_start, *grouping_cols), window starts on the view's grid,
grouping values non-null and non-empty unless the topic's declaration lets their column be
null or empty. Metrics are null only where their aggregation may be (``Aggregator.nullable``)
and follow the rules of their aggregation's description (:mod:`quality.schemas.metrics`):
counts are >= 0, values of the input keep the range its topic's declaration gives it (a
``minimum`` m on a column makes its min, max, mean, quantiles >= m), shares lie in [0, 1],
text is non-empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from pipelines.events.declaration import EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS, ColumnType
from pipelines.kinds import kind_of
from pipelines.segments import is_state_column, state_column
from pipelines.serving import SOURCE
from pipelines.views.model import WINDOW_END, WINDOW_START, View
from quality.schemas.archive import column_rules
from quality.schemas.metrics import metric_rules
from quality.schemas.pandas_backend import pandas_schema, to_pandas, validate_frame
from quality.schemas.spec import (
    NON_EMPTY,
    ColumnSpec,
    FrameSpec,
    Rule,
    WindowWidth,
    ge,
    lt,
    matches,
    multiple_of,
)

if TYPE_CHECKING:
    import pandera.pandas as pdp

__all__ = [
    "SegmentKind",
    "corrected_schema",
    "detect_kind",
    "query_schema",
    "realtime_schema",
    "segment_spec",
    "validate_segment",
]

SOURCE_PATTERN = r"^(realtime|batch v[1-9][0-9]*)$"


class SegmentKind(StrEnum):
    REALTIME = "realtime"
    BATCH = "batch"
    QUERY = "query"


def _layout(view: View, kind: SegmentKind) -> pa.Schema:
    """The writer's own layout of the rows, so types are never written down twice."""
    if kind is SegmentKind.REALTIME:
        # pipelines.stream imports Kafka and the control store: not for the batch job
        from pipelines.stream.state import WindowState

        return WindowState(view).segment_table(0).schema
    if kind is SegmentKind.BATCH:
        from pipelines.batch.windows import batch_schema  # imports pyspark: only when needed

        return batch_schema(view)
    return view.output_schema().append(pa.field(SOURCE, pa.string()))


def _window_rules(view: View, field: pa.Field) -> tuple[Rule, ...]:
    grid = (multiple_of(view.step_ms),)
    if pa.types.is_timestamp(field.type):
        return grid
    return (*grid, ge(view.window_start(EVENT_TIME_MIN_MS)), lt(EVENT_TIME_MAX_MS))


def _group_rules(view: View, field: pa.Field) -> tuple[bool, tuple[Rule, ...]]:
    """(nullable, rules) of a grouping column: a column its topic declares nullable may hold
    null (a group of its own), and a string may be empty only where its events' may."""
    declaration = view.declaration
    if declaration is None:
        return False, (NON_EMPTY,)
    nullable = field.name in declaration.nullable_columns()
    if not pa.types.is_string(field.type):
        return nullable, ()
    if declaration.columns().get(field.name) is not ColumnType.STRING:
        return nullable, (NON_EMPTY,)  # a value's text
    own = column_rules(declaration).get(field.name, ())
    return nullable, tuple(r for r in own if r is NON_EMPTY)


def segment_spec(view: View, kind: SegmentKind | str) -> FrameSpec:
    """The spec of ``view``'s rows at one boundary; both pandera schemas derive from it."""
    view_kind = kind_of(view)
    if not view_kind.value_rules:
        raise ValueError(
            f"{view.name} is a {view_kind.label} view: segment schemas cover the kinds whose rows "
            "have value rules (its rows are checked by the reconciliation, quality.reconcile)"
        )
    if kind not in set(SegmentKind):
        known = ", ".join(SegmentKind)
        raise ValueError(f"segment kind must be one of {known}, got {kind!r}")
    kind = SegmentKind(kind)
    layout = _layout(view, kind)
    metrics = {
        name: (agg, rules)
        for agg in view.aggregators
        for name, rules in metric_rules(agg, view.declaration).items()
    }
    states = {state_column(agg.out) for agg in view.aggregators}
    columns = []
    for field in layout:
        name = field.name
        nullable = False
        if name == WINDOW_START:
            rules = _window_rules(view, field)
        elif name in view.grouping_cols:
            nullable, rules = _group_rules(view, field)
        elif name in metrics:
            agg, rules = metrics[name]
            nullable = agg.nullable
        elif name == SOURCE:
            rules = (matches(SOURCE_PATTERN),)
        elif name == WINDOW_END or name in states:
            rules = ()
            nullable = kind is SegmentKind.BATCH  # a state Spark cannot build is null
        else:
            raise AssertionError(f"{view.name}: no rule for column {name!r} of {kind} rows")
        columns.append(ColumnSpec(name, field.type, nullable, rules))
    width = WindowWidth(WINDOW_START, WINDOW_END, view.interval_ms)
    return FrameSpec(
        f"{kind} rows of view {view.name}",
        tuple(columns),
        unique=(WINDOW_START, *view.grouping_cols),
        width=width if kind is SegmentKind.QUERY else None,
    )


def realtime_schema(view: View) -> pdp.DataFrameSchema:
    """pandera (pandas) schema of a task's realtime segment table of ``view``."""
    return pandas_schema(segment_spec(view, SegmentKind.REALTIME))


def corrected_schema(view: View) -> pdp.DataFrameSchema:
    """pandera (pandas) schema of ``view``'s corrected (batch) segment rows."""
    return pandas_schema(segment_spec(view, SegmentKind.BATCH))


def query_schema(view: View) -> pdp.DataFrameSchema:
    """pandera (pandas) schema of what ``query_view`` returns for ``view``."""
    return pandas_schema(segment_spec(view, SegmentKind.QUERY))


def detect_kind(columns: list[str], metrics: Sequence[str] = ()) -> SegmentKind:
    """Which of the three shapes a table has, from its columns (batch rows hold states too,
    but also the ``metrics``, which realtime rows never do)."""
    if WINDOW_END in columns or SOURCE in columns:
        return SegmentKind.QUERY
    if any(is_state_column(c) for c in columns) and not set(metrics) & set(columns):
        return SegmentKind.REALTIME
    return SegmentKind.BATCH


def validate_batch_rows(table: pa.Table, view: View) -> None:
    """``correct_hours(validate_rows=...)``: the correction's collected rows of ``view``,
    checked in the driver with pandas before they are published. The same spec as
    :func:`~quality.schemas.validate_spark_segment`, without its Spark job and the round trips
    a Spark Connect session pays for each view."""
    validate_segment(view, table, SegmentKind.BATCH)


def validate_segment(
    view: View, data: pa.Table | pd.DataFrame, kind: SegmentKind | str | None = None
) -> pd.DataFrame:
    """Check realtime, batch or query rows of ``view`` (told by ``kind`` or the columns);
    returns them as pandas or raises :class:`~quality.exceptions.SchemaViolation`."""
    frame = data if isinstance(data, pa.Table) else to_pandas(data)
    names = frame.column_names if isinstance(frame, pa.Table) else list(frame.columns)
    kind = kind or detect_kind(names, view.metric_columns)
    return validate_frame(segment_spec(view, kind), frame)
