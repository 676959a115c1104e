"""Windowed views (``kind: window``): fixed event-time windows per group, tumbling or
sliding. Each window of each group is a row; its states are the table's state columns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.kinds.base import CorrectionRun
from pipelines.segments import state_column
from pipelines.views.model import WINDOW, WINDOW_END, WINDOW_START, View, format_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.storage import ObjectStore
    from pipelines.stream.view_state import ViewState
    from pipelines.tables import AsOf

__all__ = ["WINDOWED", "Windowed"]


class Windowed:
    """The windowed kind. Its stream state, correction and read sit in the layers above the
    view model (stream, batch, serving), which ask the kind for them: it imports each when
    asked, so that the model's own readers (tables, segments) can import the kind."""

    name = WINDOW
    label = "windowed"
    time_columns = (WINDOW_START, WINDOW_END)
    value_rules = True
    sum_bucket_ms = 1

    def state_columns(self, view: View) -> list[str]:
        return [state_column(a.out) for a in view.aggregators]

    def timing(self, view: View) -> str:
        return format_duration(view.interval_ms)

    def column_role(self, view: View, name: str) -> str | None:
        return "window bound" if name in self.time_columns else None

    def settings(self, view: View) -> dict[str, object]:
        return {
            "grouping_cols": list(view.grouping_cols),
            "interval": format_duration(view.interval_ms),
        }

    def bucket_refusal(self, view: View) -> str | None:
        return None

    def stream_state(self, view: View) -> ViewState:
        from pipelines.stream.state import WindowState

        return WindowState(view)

    def correct(
        self,
        spark: SparkSession,
        store: ObjectStore,
        views: Sequence[View],
        hours: list[int],
        run: CorrectionRun,
    ) -> None:
        from pipelines.batch.windows import correct_window_hours

        run.counted.update(
            correct_window_hours(
                spark,
                store,
                views,
                hours,
                run.s3_scheme,
                run.emit,
                run.validate_segment,
                run.validate_rows,
            )
        )

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
        from pipelines.serving.query import query_windows
        from pipelines.serving.rollup import rollup_view

        if active:
            raise QueryError(f"--active is for session views; {view.name} is a windowed view")
        if granularity_ms:
            return rollup_view(store, view, start_ms, end_ms, granularity_ms)
        return query_windows(store, view, start_ms, end_ms, prefer, as_of=as_of)

    def check_rollup(self, view: View) -> None:
        return None

    def realtime_table(
        self, view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
    ) -> pa.Table:
        from pipelines.serving.query import realtime_rows

        rows = [row for files in segments for row in realtime_rows(view, files)]
        return pa.Table.from_pylist(rows, schema=schema)


WINDOWED = Windowed()
