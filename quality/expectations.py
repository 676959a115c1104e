"""Great-expectations suites for the corrected views: what every corrected segment must satisfy.

Each suite is derived from a :class:`View` alone, so a new view gets its expectations without
code here:

- completeness: every window starting in the checked segments is present and no other
  (windows, not groups: a quiet group may legitimately have no row), window_start non-null;
- non-negative counts (count, count_distinct, approx_count_distinct), and non-negative sums,
  means, minima, maxima, quantiles, first and last values of fields the event schema keeps
  non-negative;
- distinct <= count where a view has both a distinct metric and a row count;
- quantile order: each lower quantile column <= the next one;
- row count within bounds learned from the published corrections of the segments before the
  checked ones (a warning, not an error: traffic moves; see :class:`ExpectationSettings`).

Validation runs in one ephemeral great-expectations context per process (no files, no
network) over a pandas frame, and returns a plain :class:`SuiteResult`. Importing
great-expectations takes 5-9 s of CPU, so it happens on first use, never at import of this
module (Dagster loads the code location without paying for it), without pyspark (see
:func:`_without_pyspark`), and a run that will check can start it early in a background
thread (:func:`preload`) while it waits on Spark.
"""

from __future__ import annotations

import importlib.abc
import itertools
import json
import logging
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
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
from pipelines.views.model import WINDOW_START, View
from quality.config import ExpectationSettings

if TYPE_CHECKING:
    import great_expectations as gx

__all__ = [
    "CRITICAL",
    "NON_NEGATIVE_FIELDS",
    "WARNING",
    "ExpectationOutcome",
    "RowBounds",
    "SuiteResult",
    "archived_segments",
    "build_suite",
    "checked_range",
    "expected_windows",
    "learn_row_bounds",
    "preload",
    "validate_table",
    "validate_view",
]

log = logging.getLogger(__name__)

PRELOAD_NICENESS = 10
"""Niceness of :func:`preload`'s thread: below the Spark job it overlaps."""

CRITICAL = "critical"
"""Severity of expectations a correct segment can never break."""
WARNING = "warning"
"""Severity of expectations learned from history: traffic may legitimately move."""

NON_NEGATIVE_FIELDS = frozenset({"bytes_tx"})
"""Event fields the decoder rejects below zero (``out_of_range`` dead letters)."""

_CONTAINS = "expect_column_distinct_values_to_contain_set"
_COUNTS = frozenset({"count", "count_distinct", "approx_count_distinct"})
_DISTINCT = frozenset({"count_distinct", "approx_count_distinct"})
_VALUES_OF_INPUT = frozenset({"sum", "mean", "min", "max", "quantiles", "first", "last"})
"""Outputs that are a sum, an average or one of the input values: >= 0 when the input is."""


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
    store: ObjectStore,
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
    published = corrected_segments(store, view, list(range(since, first, view.segment_ms)))
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


def _gx():
    """great_expectations with its one ephemeral context, both made on first use.

    Analytics are switched off before the import; its INFO chatter is kept out of the logs.
    A suite can only be built once a context exists, so this is the one way in.
    """
    _VALIDATOR.context()
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


def _metric_expectations(E, view: View) -> list:
    """Signs, distinct <= count and quantile order, from the view's aggregations."""
    expectations = []
    counts: list[str] = []
    distincts: list[str] = []
    for agg in view.aggregators:
        if agg.name in _COUNTS or (
            agg.name in _VALUES_OF_INPUT and agg.spec.col_name in NON_NEGATIVE_FIELDS
        ):
            expectations += [
                E.ExpectColumnValuesToBeBetween(
                    column=f.name, min_value=0, description=f"{f.name} >= 0"
                )
                for f in agg.output_fields()
            ]
        if agg.name == "count":
            counts.append(agg.out)
        elif agg.name in _DISTINCT:
            distincts.append(agg.out)
        if agg.name == "quantiles":
            ordered = [agg.column_for(q) for q in sorted(set(agg.quantiles))]
            expectations += [
                _a_at_least_b(E, high, low) for low, high in itertools.pairwise(ordered)
            ]
    if counts:  # a distinct count without a row count is compared with nothing
        expectations += [_a_at_least_b(E, counts[0], distinct) for distinct in distincts]
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
    gx = _gx()
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
    suite = gx.ExpectationSuite(name=f"{view.name}_corrected")
    for expectation in expectations:
        suite.add_expectation(expectation)
    return suite


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
    """Wall time of the great-expectations validation alone."""
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


class _Validator:
    """One ephemeral context per process, one pandas dataframe asset per view."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._source = None
        self._batches: dict[str, Any] = {}

    def context(self) -> None:
        with self._lock:
            if self._source is not None:
                return
            started = time.monotonic()
            os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
            gx_log = logging.getLogger("great_expectations")
            if gx_log.level == logging.NOTSET:
                gx_log.setLevel(logging.WARNING)
            with _without_pyspark():
                import great_expectations as gx
                from great_expectations.data_context.types.base import (
                    DataContextConfig,
                    InMemoryStoreBackendDefaults,
                    ProgressBarsConfig,
                )

            config = DataContextConfig(  # in-memory stores, no docs site, no analytics
                store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
                analytics_enabled=False,
                progress_bars=ProgressBarsConfig(globally=False),
            )
            context = gx.get_context(mode="ephemeral", project_config=config)
            self._source = context.data_sources.add_pandas("sluice")
            log.info("great-expectations context ready in %.1fs", time.monotonic() - started)

    def _batch_definition(self, view: str):
        self.context()
        if view not in self._batches:
            asset = self._source.add_dataframe_asset(view)
            self._batches[view] = asset.add_batch_definition_whole_dataframe("corrected")
        return self._batches[view]

    def validate(self, view: View, frame, suite, sample_size: int):
        with self._lock:
            batch = self._batch_definition(view.name).get_batch(
                batch_parameters={"dataframe": frame}
            )
            result_format = {
                "result_format": "SUMMARY",
                "partial_unexpected_count": sample_size,
                "unexpected_index_column_names": [WINDOW_START, *view.grouping_cols],
            }
            return batch.validate(suite, result_format=result_format)


_VALIDATOR = _Validator()


class _NoPysparkHere(importlib.abc.MetaPathFinder):
    """Refuses pyspark to one thread: others importing it meanwhile are not affected."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if threading.get_ident() == self.thread and name.partition(".")[0] == "pyspark":
            raise ModuleNotFoundError(f"No module named {name!r} (not for great-expectations)")
        return None


@contextmanager
def _without_pyspark() -> Iterator[None]:
    """great-expectations probes for pyspark at import (pyspark, pyspark.ml, Spark Connect:
    1-2 s of CPU, and pyspark in a Dagster run worker that otherwise never loads it). The
    suites validate pandas frames, so where pyspark is not loaded yet the probe, in this
    thread only, finds it missing; a later ``import pyspark`` works as ever."""
    if "pyspark" in sys.modules:
        yield
        return
    finder = _NoPysparkHere()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def preload() -> threading.Thread:
    """Import great-expectations and make its context in a daemon thread, and return it.

    A correction run calls this before it waits on Spark: the import then overlaps the
    Spark job instead of delaying the run's first expectations check. A check that comes
    first simply waits for the context's lock; an error here is logged, and the check's own
    call raises it again.
    """

    def load() -> None:
        # Niced (Linux sets priorities per thread): the Spark job it overlaps goes first.
        with suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PRELOAD_NICENESS)
        try:
            _VALIDATOR.context()
        except Exception:
            log.warning("preloading great-expectations failed", exc_info=True)

    thread = threading.Thread(target=load, name="gx-preload", daemon=True)
    thread.start()
    return thread


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
    validation = _VALIDATOR.validate(view, frame, suite, settings.sample_size)
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
    table = query_view(store, view, first, end, prefer=prefer)
    bounds = learn_row_bounds(store, view, first, end, settings, checked=len(segments))
    return validate_table(view, table, first, end, bounds, settings, segments)
