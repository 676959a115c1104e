"""The correction's derived columns: computed from the archived columns when a view reads
them, with the Spark compilation of the same parsed expressions the stream evaluates, so an
hour archived before a derived column was declared is corrected with it too."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame

from pipelines.expressions.derived import Derived
from pipelines.expressions.derived import stored_columns as _stored
from pipelines.views.model import View

__all__ = ["stored_columns", "with_derived"]


def _derived(view: View) -> tuple[Derived, ...]:
    return () if view.declaration is None else view.declaration.derived_columns()


def stored_columns(view: View, columns: Iterable[str]) -> set[str]:
    """``columns`` with each derived one replaced by the archived columns it is computed
    from (through earlier derived ones)."""
    return _stored(_derived(view), columns)


def with_derived(rows: DataFrame, view: View) -> DataFrame:
    """``rows`` of ``view``'s topic with the topic's derived columns, in declared order."""
    for column in _derived(view):
        rows = rows.withColumn(column.name, column.spark())
    return rows
