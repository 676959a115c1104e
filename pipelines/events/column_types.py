"""What a column holds: the types a declaration gives its columns.

A module of its own, so the expression languages (``where:`` filters, derived columns) can
type their columns without importing the declaration, which parses derived columns with them.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ColumnType"]


class ColumnType(StrEnum):
    """What a column holds, as views, filters and aggregations see it."""

    STRING = "string"
    LONG = "long"
    """A 64-bit integer: sums and counts stay exact."""
    DOUBLE = "double"
    BOOLEAN = "boolean"
    TIMESTAMP = "timestamp"
    """An instant, held as epoch milliseconds UTC (parsed with the field's ``format``)."""

    @property
    def numeric(self) -> bool:
        return self in (ColumnType.LONG, ColumnType.DOUBLE)
