"""Per-task window state of one view: partial aggregates keyed by (window, group).

State is bucketed by segment (an hour of event time) because realtime segments are written
per segment: a flush rewrites the whole segment file of each dirty bucket, so files are
full snapshots of the task's partials, never deltas, and a replay simply overwrites them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.events.decode import DecodedBatch
from pipelines.views.model import WINDOW_START, View

__all__ = ["ViewState", "state_column"]

GroupKey = tuple  # (window_start_ms, *group values)


def state_column(out: str) -> str:
    return f"{out}__state"


class ViewState:
    """The open windows of one view in one task, plus its processed/late counters."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.aggregators = view.aggregators
        self.buckets: dict[int, dict[GroupKey, list[Any]]] = {}
        self.dirty: set[int] = set()
        self.processed = 0
        self.late = 0

    def update(self, batch: DecodedBatch) -> None:
        """Fold a decoded batch in; events whose window closed before they came are late."""
        if not len(batch):
            return
        view = self.view
        times = batch.columns["event_time"]
        starts = times - times % view.interval_ms
        late = starts + (view.interval_ms + view.allowed_lateness_ms) <= batch.prior_watermark
        n_late = int(late.sum())
        self.late += n_late
        if n_late:
            keep = ~late
            if not keep.any():
                return
            starts = starts[keep]
            times = times[keep]
            columns = {name: col[keep] for name, col in batch.columns.items()}
        else:
            columns = batch.columns
        self.processed += len(times)
        inputs = [
            columns[agg.spec.col_name] if agg.spec.col_name else None for agg in self.aggregators
        ]
        for key, idx in self._groups(starts, columns).items():
            window = key[0]
            segment = window - window % view.segment_ms
            bucket = self.buckets.get(segment)
            if bucket is None:
                bucket = self.buckets[segment] = {}
            states = bucket.get(key)
            if states is None:
                states = bucket[key] = [agg.initialize() for agg in self.aggregators]
            group_times = times[idx]
            for j, agg in enumerate(self.aggregators):
                values = inputs[j]
                states[j] = agg.update(
                    states[j], None if values is None else values[idx], group_times
                )
            self.dirty.add(segment)

    def _groups(self, starts: np.ndarray, columns: dict[str, np.ndarray]) -> dict[GroupKey, Any]:
        if not self.view.grouping_cols:
            uniques, inverse = np.unique(starts, return_inverse=True)
            return {(int(w),): np.flatnonzero(inverse == i) for i, w in enumerate(uniques)}
        frame = {WINDOW_START: starts}
        for col in self.view.grouping_cols:
            values = columns[col]
            frame[col] = values if values.dtype == object else values.astype(str)
        keys = [WINDOW_START, *self.view.grouping_cols]
        indices = pd.DataFrame(frame, copy=False).groupby(keys, sort=False).indices
        return {(int(k[0]), *k[1:]): v for k, v in indices.items()}

    def closed_segments(self, watermark: int) -> list[int]:
        """Segments no in-time event can reach any more."""
        limit = watermark - self.view.allowed_lateness_ms
        return [s for s in self.buckets if s + self.view.segment_ms <= limit]

    def evict(self, segments: Iterable[int]) -> None:
        for segment in segments:
            self.buckets.pop(segment, None)
            self.dirty.discard(segment)

    # --- serialization -------------------------------------------------------------------

    def segment_table(self, segment: int) -> pa.Table:
        """One bucket as a realtime segment table: keys plus serialized states."""
        return self._table(self.buckets.get(segment, {}).items())

    def all_table(self) -> pa.Table:
        rows = (item for bucket in self.buckets.values() for item in bucket.items())
        return self._table(rows)

    def _table(self, items: Iterable[tuple[GroupKey, list[Any]]]) -> pa.Table:
        items = list(items)
        data: dict[str, list] = {WINDOW_START: [k[0] for k, _ in items]}
        for i, col in enumerate(self.view.grouping_cols, start=1):
            data[col] = [k[i] for k, _ in items]
        for j, agg in enumerate(self.aggregators):
            data[state_column(agg.out)] = [agg.serialize(s[j]) for _, s in items]
        fields = [pa.field(WINDOW_START, pa.int64())]
        fields += [pa.field(c, pa.string()) for c in self.view.grouping_cols]
        fields += [pa.field(state_column(a.out), pa.binary()) for a in self.aggregators]
        meta = {"view": self.view.name, "fingerprint": self.view.fingerprint}
        schema = pa.schema(fields, metadata={"sluice": json.dumps(meta)})
        return pa.Table.from_pydict(data, schema=schema)

    def load(self, table: pa.Table) -> None:
        """Restore buckets from :meth:`all_table` output (a checkpoint)."""
        rows = table.to_pylist()
        for row in rows:
            key = (row[WINDOW_START], *(row[c] for c in self.view.grouping_cols))
            states = [agg.deserialize(row[state_column(agg.out)]) for agg in self.aggregators]
            segment = key[0] - key[0] % self.view.segment_ms
            self.buckets.setdefault(segment, {})[key] = states
