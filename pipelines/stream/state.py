"""Per-task window state of one view: partial aggregates keyed by (window, group).

State is bucketed by segment (an hour of event time) because realtime segments are written
per segment: a flush rewrites the whole segment file of each dirty bucket, so files are
full snapshots of the task's partials, never deltas, and a replay simply overwrites them.

Sliding windows (``slide``) are kept as panes, tumbling windows of one slide: an event
updates one pane, as with tumbling windows, and each window is the merge of its
interval / slide panes, built when its segment is written (``segment_table``). So the cost
per event is that of a tumbling window of one slide; the cost per flush grows with the
windows per event. An event is late when the first window holding it has closed (its pane's
end + allowed lateness), and it then counts in none of its windows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.aggregators import Aggregator
from pipelines.aggregators.nulls import NullMasks, with_nulls
from pipelines.events.decode import DecodedBatch
from pipelines.segments import segment_schema, state_column
from pipelines.views.model import WINDOW_START, View

__all__ = ["WindowState", "code_time_order", "fold_groups", "group_labels", "null_masks"]

GroupKey = tuple  # (window_start_ms, *group values)


def _factorized(batch: DecodedBatch, col: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of one column of the batch and its group labels (strings, None for the
    null group: a group of its own, as SQL's GROUP BY makes it), computed once for all views."""
    cached = batch.codes.get(col)
    if cached is None:
        values = group_labels(batch.columns[col], batch.nulls.get(col))
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
        uniques = np.array([u if type(u) is str else None for u in uniques], dtype=object)
        cached = batch.codes[col] = (codes, uniques)
    return cached


def group_labels(values: np.ndarray, null: np.ndarray | None = None) -> np.ndarray:
    """A column's values as group keys: strings, as in the realtime segments, written by the
    same Arrow cast that turns the correction's groups into strings (a boolean ``true`` or
    ``false``, a long its digits, a double its shortest form: ``100``, ``0.1``), None where
    the value is null (``null``: the batch's mask of a non-string column)."""
    if values.dtype == object:
        return values
    return pa.array(values, mask=null).cast(pa.string()).to_numpy(zero_copy_only=False)


def _time_order(batch: DecodedBatch, col: str) -> tuple[np.ndarray, np.ndarray]:
    """The batch's rows ordered by (code of ``col``, event time), and their codes in that
    order: sorted once for all views grouped by ``col`` alone (within a code, every window's
    rows are then one run, whatever the window's length)."""
    name = f"{col}\x00by time"
    cached = batch.codes.get(name)
    if cached is None:
        codes = _factorized(batch, col)[0]
        order = code_time_order(codes, batch.columns["event_time"])
        cached = batch.codes[name] = (order, codes[order])
    return cached


def code_time_order(codes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The stable order of rows by (code, time), as ``np.lexsort((times, codes))`` gives it:
    one stable argsort of ``code * span + (time - min)`` when that fits in 62 bits (over twice
    as fast as lexsort's two passes on a batch), else lexsort."""
    if not len(times):
        return np.empty(0, dtype=np.intp)
    low = int(times.min())
    span = int(times.max()) - low + 1
    if (int(codes.max()) + 1) * span >= 2**62 or int(codes.min()) < 0:
        return np.lexsort((times, codes))
    return np.argsort(codes.astype(np.int64) * span + (times - low), kind="stable")


def fold_groups(
    aggregators: Sequence[Aggregator],
    groups: list[list[Any]],
    inputs: list[Any],
    wheres: list[np.ndarray | None],
    times: np.ndarray,
    firsts: np.ndarray,
) -> None:
    """Fold rows sorted by group into every group's states (``groups[g][j]``: aggregation
    ``j`` of group ``g``, whose rows start at ``firsts[g]``): one batch update per aggregation
    for all the groups (:meth:`Aggregator.update_groups`). ``inputs`` and ``wheres`` are each
    aggregation's values and own where: mask in the same order; a group its where: keeps no
    row of is left alone, as one update per group left it."""
    bounds = np.append(firsts, len(times))
    for j, agg in enumerate(aggregators):
        values, rows = inputs[j], wheres[j]
        if rows is None:
            held = [states[j] for states in groups]
            agg.update_groups(held, values, times, bounds)
            for states, state in zip(groups, held, strict=True):
                states[j] = state
            continue
        counts = np.add.reduceat(rows.astype(np.int64), firsts)
        some = np.flatnonzero(counts).tolist()
        if not some:
            continue
        held = [groups[g][j] for g in some]
        agg.update_groups(
            held,
            None if values is None else values[rows],
            times[rows],
            np.concatenate(([0], np.cumsum(counts[some]))),
        )
        for g, state in zip(some, held, strict=True):
            groups[g][j] = state


def null_masks(view: View, batch: DecodedBatch) -> NullMasks:
    """Where the batch's columns are null; only the columns the view's declaration lets be
    null are looked at (every column of a view without one)."""
    declaration = view.declaration
    nullable = None if declaration is None else declaration.nullable_columns()
    return NullMasks(batch.columns, batch.nulls, nullable)


class WindowState:
    """The open windows of one view in one task, plus its processed/late counters (a
    :class:`~pipelines.stream.view_state.ViewState`)."""

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
        step = view.step_ms
        starts = times - times % step  # the window, or the pane of sliding windows
        late = starts + (step + view.allowed_lateness_ms) <= batch.prior_watermark
        keep = None
        masks = null_masks(view, batch)
        if view.filter is not None:  # an event the view's where: drops is processed, not late
            keep = view.filter.mask(with_nulls(batch.columns, masks, view.filter.fields))
            late &= keep
        n_late = int(late.sum())
        self.late += n_late
        self.processed += len(times) - n_late
        if n_late:
            keep = ~late if keep is None else keep & ~late
        if keep is not None:
            if keep.all():
                keep = None
            elif not keep.any():
                return
        at, times, starts, firsts, keys = self._groups(times, batch, keep)
        groups: list[list[Any]] = []  # each group's states, in key order
        for key in keys:
            window = key[0]
            segment = window - window % view.segment_ms
            bucket = self.buckets.get(segment)
            if bucket is None:
                bucket = self.buckets[segment] = {}
            states = bucket.get(key)
            if states is None:
                states = bucket[key] = [agg.initialize() for agg in self.aggregators]
            groups.append(states)
        columns = batch.columns  # the aggregations' inputs of every row, taken in ``at`` order
        fold_groups(
            self.aggregators,
            groups,
            [None if (v := agg.inputs(columns)) is None else v[at] for agg in self.aggregators],
            [
                None if (m := agg.rows(columns, masks)) is None else m[at]
                for agg in self.aggregators
            ],
            times,
            firsts,
        )
        for window in set(starts[firsts].tolist()):  # a few: a set beats np.unique's sort
            self.dirty.add(window - window % view.segment_ms)
            if view.is_sliding:  # windows of earlier segments that reach into this pane
                self.dirty.update(self._segments_reaching(window))

    def _segments_reaching(self, pane: int) -> range:
        """Segments with a window that holds ``pane`` (sliding windows)."""
        view = self.view
        first = view.segment_start(pane - view.reach_ms)
        return range(first, view.segment_start(pane) + 1, view.segment_ms)

    def _groups(
        self, times: np.ndarray, batch: DecodedBatch, keep: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[GroupKey]]:
        """The ``keep`` rows (all if None) in group order, as indices into the batch, with
        their event times and windows in that order, where each group starts in it, and the
        groups' keys (window, *group values), in order.

        Each grouping column is factorized once per batch and shared by every view that groups
        by it; groups are then runs of one integer key. A view grouped by one column takes the
        batch's rows ordered by (that column, event time), sorted once for every such view
        whatever its window: its groups are then runs in that order, with no sort of its own.
        """
        view = self.view
        step = view.step_ms
        if len(view.grouping_cols) == 1:
            col = view.grouping_cols[0]
            at, codes = _time_order(batch, col)
            if keep is not None:
                taken = keep[at]
                at, codes = at[taken], codes[taken]
            ordered = times[at]
            starts = ordered - ordered % step
            change = np.empty(len(at), dtype=bool)
            change[0] = True
            np.not_equal(codes[1:], codes[:-1], out=change[1:])
            change[1:] |= starts[1:] != starts[:-1]
            firsts = np.flatnonzero(change)
            labels = _factorized(batch, col)[1][codes[firsts]].tolist()
            keys = list(zip(starts[firsts].tolist(), labels, strict=True))
            return at, ordered, starts, firsts, keys
        rows = np.arange(len(times)) if keep is None else np.flatnonzero(keep)
        kept = times[rows]
        key = np.unique(kept - kept % step, return_inverse=True)[1]
        for col in view.grouping_cols:
            codes, uniques = _factorized(batch, col)
            if (int(key.max()) + 1) * len(uniques) >= 2**62:  # renumber before it overflows
                key = np.unique(key, return_inverse=True)[1]
            key = key * len(uniques) + codes[rows]
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        firsts = np.concatenate(([0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1))
        at = rows[order]
        heads = at[firsts]
        ordered_times = times[at]
        starts = ordered_times - ordered_times % step
        labels = []
        for col in view.grouping_cols:
            codes, uniques = _factorized(batch, col)
            labels.append(uniques[codes[heads]].tolist())
        keys = [tuple(k) for k in zip(starts[firsts].tolist(), *labels, strict=True)]
        return at, ordered_times, starts, firsts, keys

    def settle(self, watermark: int) -> None:
        """Nothing to do: windows fold events in as they come (session views wait for order)."""

    def pending_table(self) -> pa.Table | None:
        """None: a windowed view holds no events back (see ``SessionState.pending_table``)."""
        return None

    def closed_segments(self, watermark: int) -> list[int]:
        """Segments no in-time event can reach any more (sliding windows: nor any window of
        theirs, which may end up to ``interval - slide`` after the segment)."""
        view = self.view
        limit = watermark - view.allowed_lateness_ms
        return [s for s in self.buckets if s + view.segment_ms + view.reach_ms <= limit]

    def evict(self, segments: Iterable[int]) -> None:
        for segment in segments:
            self.buckets.pop(segment, None)
            self.dirty.discard(segment)

    # --- serialization -------------------------------------------------------------------

    """Windows hold every row of an open segment in memory (``SessionState`` does not)."""

    def segment_table(
        self, segment: int, current: Callable[[], pa.Table | None] | None = None
    ) -> pa.Table:
        """One bucket as a realtime segment table: keys plus serialized states (memory holds
        every open window, so the segment's ``current`` file is not needed)."""
        if self.view.is_sliding:
            return self._table(sorted(self._windows(segment).items()))
        return self._table(self.buckets.get(segment, {}).items())

    def _windows(self, segment: int) -> dict[GroupKey, list[Any]]:
        """The sliding windows starting in ``segment``, each the merge of its panes."""
        view = self.view
        end = segment + view.segment_ms
        windows: dict[GroupKey, list[Any]] = {}
        for bucket_start in range(segment, end + view.reach_ms, view.segment_ms):
            for (pane, *group), states in self.buckets.get(bucket_start, {}).items():
                first = max(pane - view.reach_ms, segment)
                for start in range(first, min(pane, end - view.step_ms) + 1, view.step_ms):
                    key = (start, *group)
                    held = windows.get(key)
                    windows[key] = (
                        states
                        if held is None
                        else [
                            agg.merge(a, b)
                            for agg, a, b in zip(self.aggregators, held, states, strict=True)
                        ]
                    )
        return windows

    def flushed(self, checkpoint: bool = False) -> None:
        self.dirty.clear()

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
        schema = segment_schema(fields, self.view.name, self.view.fingerprint, "realtime")
        return pa.Table.from_pydict(data, schema=schema)

    def load(self, table: pa.Table, pending: pa.Table | None = None) -> None:
        """Restore buckets from :meth:`all_table` output (a checkpoint); a group already held
        is merged with the loaded one (how a merge of virtual tasks joins their states)."""
        rows = table.to_pylist()
        for row in rows:
            key = (row[WINDOW_START], *(row[c] for c in self.view.grouping_cols))
            states = [agg.deserialize(row[state_column(agg.out)]) for agg in self.aggregators]
            segment = key[0] - key[0] % self.view.segment_ms
            bucket = self.buckets.setdefault(segment, {})
            held = bucket.get(key)
            if held is not None:
                states = [
                    agg.merge(a, b)
                    for agg, a, b in zip(self.aggregators, held, states, strict=True)
                ]
            bucket[key] = states
