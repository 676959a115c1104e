"""Session views (``kind: session``): per session key, runs of events no further apart than
an inactivity gap and no longer than a maximum duration. Each session is a row; a session
lives in the segment of the hour it started in, and its table keeps no states."""

from __future__ import annotations

from pipelines.exceptions import QueryError
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

__all__ = ["SESSIONS", "Sessions"]


class Sessions:
    """The session kind: a row per session, with its key, bounds and summary; no states."""

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

    def check_rollup(self, view: View) -> None:
        raise QueryError(f"{view.name} is a session view: sessions do not roll up")


def _spec(view: View) -> SessionSpec:
    if view.session is None:
        raise ValueError(f"view {view.name} is not a session view")
    return view.session


SESSIONS = Sessions()
