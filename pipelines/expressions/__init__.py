"""The filter language of ``where:`` (on a view or one aggregation): parsed, never evaluated.

May import: ``pipelines.events.declaration`` (the column types) and ``pipelines.exceptions`` only; the aggregators and
the views compile filters here.
"""

from pipelines.expressions.filters import Filter, FilterError, parse_filter

__all__ = ["Filter", "FilterError", "parse_filter"]
