"""Great-expectations suites for the corrected views: what every corrected segment must satisfy.

Each suite is derived from a :class:`View` and its aggregations' own descriptions
(:class:`~pipelines.aggregators.Description`), so a new view or aggregation gets its
expectations without code here:

- completeness: every window starting in the checked segments is present and no other
  (windows, not groups: a quiet group may legitimately have no row), window_start non-null;
- every numeric metric within its range (:func:`quality.schemas.metrics.output_rules`):
  counts, distinct counts, variances and histogram bins >= 0, shares in [0, 1], values of
  the input (min, mean, quantiles, first, ...) and sums within the input column's range;
- distinct counts and filtered counts <= the row's count of all its events;
- ordered outputs: each lower quantile column <= the next one, shares of a CDF in order, an
  estimate between its lower and upper bound;
- row count within bounds learned from the published corrections of the segments before the
  checked ones (a warning, not an error: traffic moves; see :class:`ExpectationSettings`).

A check builds its suite, an ephemeral great-expectations context (no files, no network) with
a pandas data source and a validation definition, runs it over the table, and returns a plain
:class:`SuiteResult`. great-expectations is imported inside the functions that build and run
suites, so only processes that check pay for its import (stream workers, the CLI and Dagster's
code location never do).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.kinds import kind_of
from pipelines.segments import (
    HOUR_MS,
    hour_label,
    hours_with_events,
)
from pipelines.serving import corrected_segments, query_view
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import WINDOW_START, View
from quality.config import ExpectationSettings
from quality.schemas.metrics import counted_pairs, output_rules
from quality.schemas.spec import Rule, RuleKind

if TYPE_CHECKING:
    import great_expectations as gx

__all__ = [
    "CRITICAL",
    "WARNING",
    "ExpectationOutcome",
    "RowBounds",
    "SuiteResult",
    "archived_segments",
    "build_suite",
    "checked_range",
    "expected_windows",
    "learn_row_bounds",
    "validate_table",
    "validate_view",
]

log = logging.getLogger(__name__)

CRITICAL = "critical"
"""Severity of expectations a correct segment can never break."""
WARNING = "warning"
"""Severity of expectations learned from history: traffic may legitimately move."""

_CONTAINS = "expect_column_distinct_values_to_contain_set"
_RANGE_RULES = (RuleKind.GE, RuleKind.LE, RuleKind.LT)
"""The rules of :func:`~quality.schemas.metrics.output_rules` a between-expectation holds."""


# --- what is checked -------------------------------------------------------------------------


def checked_range(view: View, start_ms: int, end_ms: int) -> tuple[int, int]:
    """``[start_ms, end_ms)`` widened to whole segments: what a correction of it publishes."""
    if end_ms <= start_ms:
        raise QueryError(f"empty range: end {end_ms} is not after start {start_ms}")
    last = view.segment_start(end_ms - 1)
    return view.segment_start(start_ms), last + view.segment_ms


def expected_windows(
    view: View, start_ms: int, end_ms: int, segments: Sequence[int] | None = None
) -> list[int]:
    """Starts (epoch ms) of every window of the segments covering ``[start_ms, end_ms)``, or
    only of ``segments`` (segment starts) among them."""
    first, end = checked_range(view, start_ms, end_ms)
    first += -first % view.step_ms
    windows = range(first, end, view.step_ms)
    if segments is None:
        return list(windows)
    wanted = set(segments)
    return [w for w in windows if view.segment_start(w) in wanted]


def archived_segments(store: ObjectStore, view: View, start_ms: int, end_ms: int) -> list[int]:
    """Segments covering ``[start_ms, end_ms)`` with archived events of the view's topic: the
    ones a correction publishes (hours without events stay empty, legitimately)."""
    first, end = checked_range(view, start_ms, end_ms)
    hours = hours_with_events(store, view.topic)
    return sorted({view.segment_start(h) for h in hours if first <= h < end})


@dataclass(frozen=True)
class RowBounds:
    """Rows the checked segments may hold, learned from earlier published corrections."""

    history: dict[str, int]
    """Segment label -> rows, for each published segment found in the history window."""
    segments: int
    """Segments checked; the bound scales with it."""
    low: int | None = None
    high: int | None = None
    median: float | None = None
    factor: float | None = None
    reason: str = ""
    """Why no bound was learned (too little history), empty when one was."""

    @property
    def learned(self) -> bool:
        return self.low is not None

    def summary(self) -> dict[str, Any]:
        return {
            "learned": self.learned,
            "low": self.low,
            "high": self.high,
            "median_per_segment": self.median,
            "factor": self.factor,
            "segments_checked": self.segments,
            "history_segments": len(self.history),
            "history": self.history,
            "reason": self.reason,
        }


def learn_row_bounds(
    tables: Tables,
    view: View,
    start_ms: int,
    end_ms: int,
    settings: ExpectationSettings | None = None,
    checked: int | None = None,
) -> RowBounds:
    """Bounds [n * median / f, n * median * f] from the segments published before the checked ones.

    n is the number of checked segments (``checked``, default every segment of the range);
    the history is every segment starting in the ``rows_history_hours`` before them that
    has a published correction.
    """
    settings = settings or ExpectationSettings.from_env()
    first, end = checked_range(view, start_ms, end_ms)
    segments = (end - first) // view.segment_ms if checked is None else checked
    since = view.segment_start(first - settings.rows_history_hours * HOUR_MS)
    published = corrected_segments(tables, view, list(range(since, first, view.segment_ms)))
    history = {hour_label(segment): rows for segment, rows in sorted(published.items())}
    if len(history) < settings.rows_min_history:
        reason = (
            f"{len(history)} published segment(s) in the {settings.rows_history_hours} h before "
            f"{hour_label(first)} (need {settings.rows_min_history}): no row-count bound"
        )
        return RowBounds(history, segments, reason=reason)
    median = float(statistics.median(history.values()))
    factor = settings.rows_factor
    low = math.floor(segments * median / factor)
    high = math.ceil(segments * median * factor)
    return RowBounds(history, segments, low, high, median, factor)


# --- the suite -------------------------------------------------------------------------------


def _great_expectations():
    """great_expectations, imported on first use with its analytics off and its INFO chatter
    kept out of the logs."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    gx_log = logging.getLogger("great_expectations")
    if gx_log.level == logging.NOTSET:
        gx_log.setLevel(logging.WARNING)
    import great_expectations

    return great_expectations


def _label(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M")


def _window_expectations(
    E, view: View, start_ms: int, end_ms: int, segments: Sequence[int] | None = None
) -> list:
    """Completeness: every window of the checked segments, and nothing else."""
    windows = expected_windows(view, start_ms, end_ms, segments)
    first, end = checked_range(view, start_ms, end_ms)
    span = f"{_label(first)} .. {_label(end)}"
    if segments is not None and len(segments) < (end - first) // view.segment_ms:
        span = f"the {len(segments)} segment(s) with events in {span}"
    return [
        E.ExpectColumnValuesToNotBeNull(column=WINDOW_START, description="window_start is set"),
        E.ExpectColumnDistinctValuesToContainSet(
            column=WINDOW_START,
            value_set=windows,
            description=f"all {len(windows)} windows of {span} are present",
        ),
        E.ExpectColumnValuesToBeInSet(
            column=WINDOW_START,
            value_set=windows,
            description=f"every window_start is a window of {span}",
        ),
    ]


def _a_at_least_b(E, a: str, b: str) -> Any:
    return E.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A=a, column_B=b, or_equal=True, description=f"{b} <= {a}"
    )


def _range_expectation(E, column: str, rules: Sequence[Rule]) -> Any | None:
    """One expectation holding ``column`` to its range rules (none: no range to check)."""
    bounds = {r.kind: r.value for r in rules if r.kind in _RANGE_RULES}
    if not bounds:
        return None
    high = bounds.get(RuleKind.LE, bounds.get(RuleKind.LT))
    return E.ExpectColumnValuesToBeBetween(
        column=column,
        min_value=bounds.get(RuleKind.GE),
        max_value=high,
        strict_max=RuleKind.LT in bounds and RuleKind.LE not in bounds,
        description=" and ".join(f"{column} {r.label}" for r in rules if r.kind in _RANGE_RULES),
    )


def _metric_expectations(E, view: View) -> list:
    """Ranges, counts of part of the events <= the count of all, and ordered outputs, from
    the descriptions of the view's aggregations."""
    expectations = []
    for agg in view.aggregators:
        for f in agg.output_fields():
            expectation = _range_expectation(E, f.name, output_rules(agg, f, view.declaration))
            if expectation is not None:
                expectations.append(expectation)
        expectations += [
            _a_at_least_b(E, high, low) for low, high in itertools.pairwise(agg.ordered_outputs())
        ]
    expectations += [
        _a_at_least_b(E, count, part) for part, count in counted_pairs(view.aggregators)
    ]
    return expectations


def build_suite(
    view: View,
    start_ms: int,
    end_ms: int,
    rows: RowBounds | None = None,
    segments: Sequence[int] | None = None,
) -> gx.ExpectationSuite:
    """The suite of ``view`` for the segments covering ``[start_ms, end_ms)`` (only
    ``segments`` among them, if given: their windows are expected, no others).

    Each expectation carries a ``description`` (the rule in words) and a ``severity``:
    :data:`WARNING` for the learned row-count bound, :data:`CRITICAL` for the rest.
    """
    gx = _great_expectations()
    E = gx.expectations
    expectations = _window_expectations(E, view, start_ms, end_ms, segments)
    expectations += _metric_expectations(E, view)
    if rows is not None and rows.learned:
        expectations.append(
            E.ExpectTableRowCountToBeBetween(
                min_value=rows.low,
                max_value=rows.high,
                severity=WARNING,
                description=f"rows within [{rows.low}, {rows.high}]: {rows.segments} segment(s) "
                f"x median {rows.median:g} of {len(rows.history)} earlier segment(s), "
                f"factor {rows.factor:g}",
            )
        )
    return gx.ExpectationSuite(name=f"{view.name}_corrected", expectations=expectations)


# --- running it ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's verdict, in plain values."""

    expectation: str
    """The great-expectations type, e.g. ``expect_column_values_to_be_between``."""
    columns: tuple[str, ...]
    rule: str
    severity: str
    success: bool
    observed: Any = None
    unexpected_count: int | None = None
    sample: list[Any] = field(default_factory=list)
    """Unexpected rows (window, groups and values) or missing windows, at most sample_size."""
    error: str = ""
    """Set when great-expectations could not evaluate it (e.g. a missing column)."""

    def describe(self) -> str:
        where = f" [{', '.join(self.columns)}]" if self.columns else ""
        if self.error:
            detail = f"error: {self.error}"
        elif self.unexpected_count is not None:
            what = "missing" if self.expectation == _CONTAINS else "unexpected"
            detail = f"{self.unexpected_count} {what}"
            if self.sample:
                detail += f", e.g. {json.dumps(self.sample[:3])}"
        else:
            detail = f"observed {self.observed}"
        return f"{self.rule}{where}: {detail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation,
            "columns": list(self.columns),
            "rule": self.rule,
            "severity": self.severity,
            "success": self.success,
            "observed": self.observed,
            "unexpected_count": self.unexpected_count,
            "sample": self.sample,
            "error": self.error,
        }


@dataclass(frozen=True)
class SuiteResult:
    """A view's suite over the checked segments: passed or not, and why."""

    view: str
    start_ms: int
    end_ms: int
    rows: int
    outcomes: tuple[ExpectationOutcome, ...]
    row_bounds: RowBounds | None
    seconds: float
    """Wall time of the great-expectations run alone (its context and the validation)."""
    empty_segments: int = 0
    """Segments of the range without archived events, not checked."""

    @property
    def success(self) -> bool:
        return all(o.success for o in self.outcomes)

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [o for o in self.outcomes if not o.success]

    @property
    def hard_failures(self) -> list[ExpectationOutcome]:
        """Failures no correct segment can produce (everything but learned bounds)."""
        return [o for o in self.failed if o.severity != WARNING]

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.empty_segments:
            notes.append(f"{self.empty_segments} segment(s) without archived events not checked")
        if self.row_bounds is not None and not self.row_bounds.learned:
            notes.append(self.row_bounds.reason)
        return notes

    def summary(self) -> dict[str, Any]:
        """Plain JSON-able values (what the asset check records)."""
        return {
            "view": self.view,
            "segments": f"{hour_label(self.start_ms)} .. {hour_label(self.end_ms - 1)}",
            "success": self.success,
            "rows": self.rows,
            "expectations": len(self.outcomes),
            "failed": [o.describe() for o in self.failed],
            "notes": self.notes,
            "row_bounds": None if self.row_bounds is None else self.row_bounds.summary(),
            "seconds": round(self.seconds, 3),
            "results": [o.to_dict() for o in self.outcomes],
        }


def _validate(view: View, frame: Any, suite: gx.ExpectationSuite, sample_size: int) -> Any:
    """Run ``suite`` over ``frame`` in an ephemeral context of its own: a pandas data source,
    the frame as one whole-dataframe batch, and a validation definition tying it to the
    suite (in memory: no files, no docs site, no analytics, no progress bars)."""
    gx = _great_expectations()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    batch = (
        context.data_sources.add_pandas(view.name)
        .add_dataframe_asset("corrected")
        .add_batch_definition_whole_dataframe("checked segments")
    )
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=suite.name, data=batch, suite=context.suites.add(suite))
    )
    return validation.run(
        batch_parameters={"dataframe": frame},
        result_format={
            "result_format": "SUMMARY",
            "partial_unexpected_count": sample_size,
            "unexpected_index_column_names": [WINDOW_START, *view.grouping_cols],
        },
    )


def _plain(value: Any) -> Any:
    """JSON-able copy of a great-expectations value (numpy scalars, tuples, ...)."""

    def default(item: Any) -> Any:
        return item.item() if hasattr(item, "item") else str(item)

    return json.loads(json.dumps(value, default=default))


def _readable(row: Any) -> Any:
    """An unexpected row with its window as ISO minutes, the way the UI shows windows."""
    if isinstance(row, dict) and WINDOW_START in row:
        return {**row, WINDOW_START: _label(int(row[WINDOW_START]))}
    return row


def _exception(info: dict | None) -> str:
    """The message of an exception great-expectations caught: flat, or keyed by metric."""
    infos = [info] if info and "raised_exception" in info else list((info or {}).values())
    for item in infos:
        if isinstance(item, dict) and item.get("raised_exception"):
            return str(item.get("exception_message") or "raised an exception")
    return ""


def _outcome(result, sample_size: int) -> ExpectationOutcome:
    config = result.expectation_config
    kwargs = config.kwargs
    columns = tuple(
        kwargs[k] for k in ("column", "column_A", "column_B") if isinstance(kwargs.get(k), str)
    )
    details = result.result or {}
    error = _exception(result.exception_info)
    if "partial_missing_list" in details:  # completeness: the windows that are not there
        sample = [_label(int(w)) for w in sorted(details["partial_missing_list"])[:sample_size]]
        unexpected = details.get("missing_count")
    else:
        rows = details.get("partial_unexpected_index_list") or details.get(
            "partial_unexpected_list", []
        )
        sample = [_readable(r) for r in rows[:sample_size]]
        unexpected = details.get("unexpected_count")
    severity = getattr(config, "severity", None) or CRITICAL
    return ExpectationOutcome(
        expectation=config.type,
        columns=columns,
        rule=config.description or config.type,
        severity=str(getattr(severity, "value", severity)),
        success=bool(result.success),
        observed=_plain(details.get("observed_value")),
        unexpected_count=None if unexpected is None else int(unexpected),
        sample=_plain(sample),
        error=error,
    )


def _frame(table: pa.Table):
    """The table as pandas, window_start as epoch ms (as batch segments store it)."""
    index = table.schema.get_field_index(WINDOW_START)
    if index >= 0 and pa.types.is_timestamp(table.schema.field(index).type):
        as_ms = table.column(index).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        table = table.set_column(index, WINDOW_START, as_ms)
    return table.to_pandas()


def validate_table(
    view: View,
    table: pa.Table,
    start_ms: int,
    end_ms: int,
    row_bounds: RowBounds | None = None,
    settings: ExpectationSettings | None = None,
    segments: Sequence[int] | None = None,
) -> SuiteResult:
    """Run ``view``'s suite over ``table`` (a :func:`query_view` result of the range)."""
    settings = settings or ExpectationSettings.from_env()
    first, end = checked_range(view, start_ms, end_ms)
    suite = build_suite(view, first, end, row_bounds, segments)
    frame = _frame(table)
    started = time.monotonic()
    validation = _validate(view, frame, suite, settings.sample_size)
    seconds = time.monotonic() - started
    outcomes = tuple(_outcome(r, settings.sample_size) for r in validation.results)
    skipped = 0 if segments is None else (end - first) // view.segment_ms - len(segments)
    result = SuiteResult(
        view.name, first, end, table.num_rows, outcomes, row_bounds, seconds, skipped
    )
    log.info(
        "%s %s: %d/%d expectations passed in %.2fs",
        view.name,
        result.summary()["segments"],
        len(outcomes) - len(result.failed),
        len(outcomes),
        seconds,
    )
    return result


def validate_view(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    settings: ExpectationSettings | None = None,
    prefer: str = "batch",
    *,
    tables: Tables,
) -> SuiteResult:
    """Validate the served values (corrected by default) of the segments covering the range
    that have archived events; segments without any are empty by right and not checked."""
    kind = kind_of(view)
    if not kind.value_rules:
        raise ValueError(
            f"{view.name} is a {kind.label} view: expectation suites cover the kinds whose rows "
            "have value rules (its rows are checked by the reconciliation, quality.reconcile)"
        )
    settings = settings or ExpectationSettings.from_env()
    first, end = checked_range(view, start_ms, end_ms)
    segments = archived_segments(store, view, first, end)
    table = query_view(store, view, first, end, prefer=prefer, tables=tables)
    bounds = learn_row_bounds(tables, view, first, end, settings, checked=len(segments))
    return validate_table(view, table, first, end, bounds, settings, segments)
