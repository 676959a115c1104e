"""What every kind of view says about itself, so that no other module asks which kind it holds.

A kind is what a ``kind:`` in a view's definition selects. As bytewax keeps a windower's
configuration apart from the per-key logic it builds, a kind here holds the facts of its
configuration: its table's time and state columns, how a listing and a catalog show it,
whether its rows roll up or split into key buckets, and what the quality layer builds its
checks from. The logic each layer runs for a kind (its stream state, its correction, its
serving read, its reconciliation) is that layer's own, registered under the kind's name
(:data:`pipelines.stream.view_state.STATES`, :data:`pipelines.batch.correct.CORRECTIONS`,
:data:`pipelines.serving.query.READS`, :data:`quality.reconcile.kinds.RECONCILERS`), so
imports run one way: every layer may ask a kind, a kind asks none of them.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.views.model import View

__all__ = ["ViewKind"]


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

    def check_rollup(self, view: View) -> None:
        """Raise :class:`~pipelines.exceptions.QueryError` if the rows cannot be rolled up."""
