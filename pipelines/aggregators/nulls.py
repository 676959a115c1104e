"""Where a decoded batch's columns are null, as SQL sees them.

A decoded batch holds a null of a long, double, boolean or timestamp column as 0 (0.0, False)
with a mask beside it (:attr:`pipelines.events.decode.DecodedBatch.nulls`), and a null string
as None. Aggregations skip the rows where an input is null, and filters must not read the 0 as
a value: both ask :class:`NullMasks`, which computes each column's mask once per batch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

__all__ = ["NullMasks", "with_nulls"]


class NullMasks:
    """The null mask of each column of one batch (None: the column has no null in it)."""

    def __init__(
        self,
        columns: Mapping[str, np.ndarray],
        nulls: Mapping[str, np.ndarray] | None = None,
        nullable: Collection[str] | None = None,
    ) -> None:
        """``nulls``: the batch's masks of non-string columns; ``nullable``: the columns that
        may hold a null at all (None: any may), so the others' strings are never scanned."""
        self.columns = columns
        self.nulls = nulls or {}
        self.nullable = nullable
        self._found: dict[str, np.ndarray | None] = {}

    def of(self, name: str) -> np.ndarray | None:
        """Where ``name`` is null, or None when it is null nowhere in the batch."""
        if name in self._found:
            return self._found[name]
        mask = self.nulls.get(name)
        if mask is None and (self.nullable is None or name in self.nullable):
            values = self.columns[name]
            if values.dtype == object:
                mask = values == None  # noqa: E711  (elementwise: where the string is None)
            elif values.dtype.kind == "f":
                mask = np.isnan(values)
        if mask is not None and not mask.any():
            mask = None
        self._found[name] = mask
        return mask

    def present(self, names: Collection[str]) -> np.ndarray | None:
        """Rows where every one of ``names`` has a value (None: every row)."""
        keep = None
        for name in names:
            mask = self.of(name)
            if mask is not None:
                keep = ~mask if keep is None else keep & ~mask
        return keep


def with_nulls(columns: Mapping[str, np.ndarray], masks: NullMasks, names: Collection[str]) -> dict:
    """``columns`` with each of ``names`` that has a null as an object array holding None
    there, as a filter reads a null (a long's 0 under its mask is not a value); the columns
    without a null are the batch's own arrays."""
    out = dict(columns)
    for name in names:
        mask = masks.of(name)
        if mask is not None and columns[name].dtype != object:
            values = columns[name].astype(object)
            values[mask] = None
            out[name] = values
    return out
