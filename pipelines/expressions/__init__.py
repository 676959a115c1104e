"""Sluice's expression languages: ``where:`` filters (on a view or one aggregation) and a
topic's derived columns, each parsed once into a tree and compiled for numpy (the stream),
Spark (the correction) and DuckDB (the reconciliation), never evaluated as Python.

May import: ``pipelines.events.column_types`` (the column types) and ``pipelines.exceptions``
only; the declarations, the aggregators and the views compile expressions here.
"""

from pipelines.expressions.derived import Derived, ExpressionError, parse_derived
from pipelines.expressions.filters import Filter, FilterError, parse_filter

__all__ = ["Derived", "ExpressionError", "Filter", "FilterError", "parse_derived", "parse_filter"]
