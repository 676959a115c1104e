"""Windowed views (``kind: window``): fixed event-time windows per group, tumbling or
sliding. Each window of each group is a row; its states are the table's state columns."""

from __future__ import annotations

from pipelines.segments import state_column
from pipelines.views.model import WINDOW, WINDOW_END, WINDOW_START, View, format_duration

__all__ = ["WINDOWED", "Windowed"]


class Windowed:
    """The windowed kind: a row per window and group, with a state column per aggregation."""

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

    def check_rollup(self, view: View) -> None:
        return None


WINDOWED = Windowed()
