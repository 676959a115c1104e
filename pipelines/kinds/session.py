"""Session views (``kind: session``): per session key, runs of events no further apart than
an inactivity gap and no longer than a maximum duration. Each session is a row; a session
lives in the segment of the hour it started in, and its table keeps no states."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.kinds.base import CorrectionRun
from pipelines.segments import HOUR_MS
from pipelines.views.model import (
    SESSION,
    SESSION_COLUMNS,
    SESSION_END,
    SESSION_START,
    SessionSpec,
    View,
    format_duration,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.storage import ObjectStore
    from pipelines.stream.view_state import ViewState
    from pipelines.tables import AsOf

__all__ = ["SESSIONS", "Sessions"]


class Sessions:
    """The session kind. Like :class:`~pipelines.kinds.windowed.Windowed`, it imports its
    stream state, correction and read (layers above the view model) when asked."""

    name = SESSION
    label = "session"
    time_columns = (SESSION_START, SESSION_END)
    value_rules = False
    sum_bucket_ms = HOUR_MS

    def state_columns(self, view: View) -> list[str]:
        return []

    def timing(self, view: View) -> str:
        spec = _spec(view)
        return f"gap {format_duration(spec.gap_ms)}, max {format_duration(spec.max_duration_ms)}"

    def column_role(self, view: View, name: str) -> str | None:
        if name == _spec(view).key:
            return "session key"
        return "session bounds and summary" if name in SESSION_COLUMNS else None

    def settings(self, view: View) -> dict[str, object]:
        spec = _spec(view)
        return {
            "kind": view.kind,
            "session_key": spec.key,
            "gap": format_duration(spec.gap_ms),
            "max_duration": format_duration(spec.max_duration_ms),
            "kept_fields": list(spec.kept_fields),
            "max_kept_events": spec.max_kept_events,
        }

    def bucket_refusal(self, view: View) -> str | None:
        return "a session must stay whole in one task"

    def stream_state(self, view: View) -> ViewState:
        from pipelines.stream.sessions import SessionState

        return SessionState(view)

    def correct(
        self,
        spark: SparkSession,
        store: ObjectStore,
        views: Sequence[View],
        hours: list[int],
        run: CorrectionRun,
    ) -> None:
        from pipelines.batch.sessions import correct_session_hours

        for view in views:
            segments = sorted({view.segment_start(h) for h in hours})
            correct_session_hours(
                spark,
                store,
                view,
                segments,
                s3_scheme=run.s3_scheme,
                emit=run.emit,
                counted=run.counted,
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
        from pipelines.serving.sessions import ACTIVE, STARTED, query_sessions

        # Sessions do not roll up (check_rollup): a granularity leaves them as they are.
        match = ACTIVE if active else STARTED
        return query_sessions(store, view, start_ms, end_ms, prefer, match=match, as_of=as_of)

    def check_rollup(self, view: View) -> None:
        raise QueryError(f"{view.name} is a session view: sessions do not roll up")

    def realtime_table(
        self, view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
    ) -> pa.Table:
        from pipelines.serving.sessions import realtime_sessions_table

        # A column at a time: a day holds over a hundred thousand sessions.
        tables = [realtime_sessions_table(view, files) for files in segments]
        return pa.concat_tables(tables).cast(schema)


def _spec(view: View) -> SessionSpec:
    if view.session is None:
        raise ValueError(f"view {view.name} is not a session view")
    return view.session


SESSIONS = Sessions()
