"""What a reconciliation pass reads once for all its hours instead of once per hour."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from pipelines.kinds import kind_of
from pipelines.segments import HOUR_MS, hour_runs
from pipelines.serving import query_view
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import View

__all__ = ["corrected_by_hour"]


def corrected_by_hour(
    store: ObjectStore, tables: Tables, view: View, hours: Sequence[int]
) -> dict[int, pa.Table]:
    """The corrected rows of each of ``hours``, as :func:`query_view` answers one hour (the
    windows, or the sessions, starting in it): one read per run of consecutive hours, cut at
    the hours, since rows come sorted by their start (a day's 24 scans of one hour each
    planned the table 24 times)."""
    start_col = kind_of(view).time_columns[0]
    out: dict[int, pa.Table] = {}
    for start, end in hour_runs(hours):
        rows = query_view(store, view, start, end, prefer="batch", tables=tables)
        starts = rows.column(start_col).cast(pa.int64()).to_numpy(zero_copy_only=False)
        bounds = np.searchsorted(starts, np.arange(start, end + 1, HOUR_MS), side="left")
        for hour, lo, hi in zip(range(start, end, HOUR_MS), bounds[:-1], bounds[1:], strict=True):
            out[hour] = rows.slice(int(lo), int(hi - lo))
    return out
