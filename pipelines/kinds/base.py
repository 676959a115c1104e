"""What every kind of view supplies, so that no other module asks which kind it holds.

A kind is the per-view logic a ``kind:`` in a view's definition selects, as bytewax's
windowers build their per-key logic from their configuration: the stream state that folds
events, the correction that recomputes segments, the columns of the view's table, the
serving read, and the plain facts the quality layer builds its checks from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from pipelines.views.model import View

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.batch.publish import CorrectionResult
    from pipelines.storage import ObjectStore
    from pipelines.stream.view_state import ViewState
    from pipelines.tables import AsOf

__all__ = ["CorrectionRun", "ViewKind"]


@dataclass
class CorrectionRun:
    """What one :func:`~pipelines.batch.correct.correct_hours` call hands every kind's
    correction: where results go and what checks them, and what one kind's pass over the
    archive already counted for the next (events and duplicates per (topic, hour))."""

    s3_scheme: str
    emit: Callable[[CorrectionResult], None]
    validate_segment: Callable[[DataFrame, View], None] | None = None
    validate_rows: Callable[[pa.Table, View], None] | None = None
    counted: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


class ViewKind(Protocol):
    name: str
    """The ``kind:`` of a view's definition."""
    label: str
    """How a summary counts views of this kind ("3 windowed")."""
    time_columns: tuple[str, str]
    """The columns bounding a row in time; the first partitions the view's table by hour."""
    value_rules: bool
    """Whether quality checks each row's values (segment schemas, expectation suites);
    without, the reconciliation alone checks the kind."""
    sum_bucket_ms: int
    """How finely the quality report sums a metric over the rows' start times (1: per row
    start)."""

    def state_columns(self, view: View) -> list[str]:
        """The table's columns of Spark-built aggregation states, one per aggregation."""

    def timing(self, view: View) -> str:
        """How a listing describes the view's cut of time."""

    def column_role(self, view: View, name: str) -> str | None:
        """What one of the kind's own output columns is (None: not one of them)."""

    def settings(self, view: View) -> dict[str, object]:
        """The definition's own settings of the kind, as a catalog shows them (lists stay
        lists; durations as in the definition)."""

    def bucket_refusal(self, view: View) -> str | None:
        """Why a topic that runs the view cannot be split into key buckets (None: it can)."""

    def stream_state(self, view: View) -> ViewState:
        """The per-task state folding the view's events."""

    def correct(
        self,
        spark: SparkSession,
        store: ObjectStore,
        views: Sequence[View],
        hours: list[int],
        run: CorrectionRun,
    ) -> None:
        """Recompute the segments of ``views`` (all of this kind) covering ``hours`` from the
        archive and publish them, one result each through ``run.emit``."""

    def query(
        self,
        store: ObjectStore,
        view: View,
        start_ms: int,
        end_ms: int,
        prefer: str = "newest",
        *,
        as_of: AsOf | None = None,
        active: bool = False,
        granularity_ms: int | None = None,
    ) -> pa.Table:
        """The view's rows starting in ``[start_ms, end_ms)`` (``active``: the rows that were
        open in it, where the kind has such rows; ``granularity_ms``: rolled up to it, where
        the kind's rows roll up)."""

    def check_rollup(self, view: View) -> None:
        """Raise :class:`~pipelines.exceptions.QueryError` if the rows cannot be rolled up."""

    def realtime_table(
        self, view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
    ) -> pa.Table:
        """The final rows of the view's realtime files (per segment, its files), as
        ``schema`` (times in epoch ms)."""
