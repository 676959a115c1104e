"""Split and merge virtual tasks *with their state*: what SEP-32 left as future work.

Both run on tasks stopped at a checkpoint (the job model's hand-off) and only rewrite
storage, deterministically from those checkpoints, so a coordinator that dies half-way and
its successor that runs the step again write the same objects.

Split ``b`` of ``F`` into ``b`` and ``b + F`` of ``2F``: each child starts at the parent's
offset and watermark; state goes as :mod:`pipelines.stream.buckets` says (a view grouped by
the key field by its groups' hashes, any other view's to the first child); the first child
keeps the parent's counters. Merge the two back: the merged task starts at the *lower* of
their offsets with the watermark of the child that was there (a bucket's watermark is its
partition's, :mod:`pipelines.stream.task`, so that is the partition's at that offset), their
states and counters merged, and a skip ``(bucket, 2F, until)`` for the child that was ahead,
so the records it had counted are not counted again (their event times still move the
watermark as the merged task reads them again).

Realtime segments: the segments still open in the old tasks' state move from the old tasks'
files to the new tasks', one :class:`~pipelines.segments.RealtimeRewrite` per view: the new
files are staged, made visible by one write of the view's rewrite record (fenced by the
coordinator's lease ``term``: a former leader's rewrite is refused with
:class:`~pipelines.segments.RewriteFenced`), then published and the old ones removed. Every
reader sees all of a segment's files from before or all from after
(:mod:`pipelines.segments.rewrites`). The segments are then recorded in the change log so the
publisher reads them again. Closed segments' files stay where they are: every file holds
partials the query merges, so it does not matter who wrote them. Session views are not split:
a session must stay whole in one task.

What an owner wrote past its last checkpoint before it died goes with the rewrite (its archive
ranges, its files of segments the state does not hold and has not closed): the new tasks count
those records again from the checkpoint. A step that could not stay exact is refused before
anything is written (:class:`RebucketError`, tried again later): a task whose checkpoint was
taken while it still held such files, and a merge whose lower watermark would open again a
segment that the child ahead in event time had closed (its state of it gone, its file final).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from pipelines.archive import counted_until, discard_uncommitted
from pipelines.exceptions import SluiceError
from pipelines.kinds import kind_of
from pipelines.segments import (
    RealtimeRewrite,
    RewriteFenced,
    parse_hour_label,
    read_parquet,
    read_rewrite_record,
    realtime_key,
    record_change,
    to_parquet,
    view_prefix,
)
from pipelines.storage import ObjectStore
from pipelines.stream.buckets import children, value_hashes
from pipelines.stream.checkpoint import TaskCheckpoint, load_checkpoint, save_checkpoint
from pipelines.stream.state import WindowState
from pipelines.stream.task_id import TaskId
from pipelines.stream.type_errors import TypeErrors
from pipelines.views.model import WINDOW_START, View

__all__ = ["RebucketError", "merge_tasks", "split_task"]

log = logging.getLogger(__name__)


class RebucketError(SluiceError, ValueError):
    """A split or merge that cannot be done (a session view, a missing checkpoint)."""


def _current_views(checkpoint: TaskCheckpoint, views: Sequence[View]) -> dict[str, View]:
    """The views whose saved state matches their definition in force (others restart empty
    at the checkpoint's offset anyway, as a restore would do)."""
    by_name = {v.name: v for v in views}
    out = {}
    for name, saved in checkpoint.views.items():
        view = by_name.get(name)
        if view is not None and saved.get("fingerprint") == view.fingerprint:
            refusal = kind_of(view).bucket_refusal(view)
            if refusal is not None:
                raise RebucketError(
                    f"{checkpoint.topic}:{checkpoint.partition} runs {kind_of(view).label} "
                    f"view {name}: {refusal}, so its partition is not split"
                )
            out[name] = view
    return out


def _segments(view: View, table: pa.Table, watermark: int) -> np.ndarray:
    """Segments whose realtime files the state's rows make. A sliding view's panes also make
    the earlier segment's windows that reach them, unless that segment closed under
    ``watermark``: its own panes left the state then, so its windows can no longer be built
    from the state, and its file is final (no task counts into it again)."""
    starts = table.column(WINDOW_START).to_numpy()
    own = np.unique(starts - starts % view.segment_ms)
    if not view.is_sliding:
        return own
    return np.union1d(own, [s for s in _earlier(view, starts) if not _closed(view, s, watermark)])


def _earlier(view: View, starts: np.ndarray) -> list[int]:
    """The earlier segments whose sliding windows reach panes starting at ``starts``."""
    reach = starts - view.reach_ms
    return np.unique(reach - reach % view.segment_ms).tolist()


def _closed(view: View, segment: int, watermark: int) -> bool:
    """No in-time event reaches ``segment``'s windows under ``watermark`` (as the state's
    eviction decides it)."""
    return segment + view.segment_ms + view.reach_ms <= watermark - view.allowed_lateness_ms


def _reopened(
    view: View, files: dict[int, str], checkpoint: TaskCheckpoint, watermark: int
) -> list[int]:
    """Segments a child ahead in event time closed (its file of them final, their own state
    gone) that the merged task's lower ``watermark`` opens again: the merged task would write
    them again without the child's part (or, for a sliding view, with the child's panes that
    reach into them counted twice), and a task made again later under the child's name would
    overwrite the child's final file."""
    if checkpoint.watermark <= watermark:
        return []
    segments = set(files)
    if view.is_sliding:
        starts = read_parquet(checkpoint.states[view.name]).column(WINDOW_START).to_numpy()
        segments.update(_earlier(view, starts))
    return sorted(
        s
        for s in segments
        if _closed(view, s, checkpoint.watermark) and not _closed(view, s, watermark)
    )


def _rows_of(view: View, table: pa.Table, segment: int) -> pa.Table:
    """The segment's realtime rows from a checkpoint's state rows (a sliding view's state
    holds panes: its windows are built as the task builds them)."""
    if view.is_sliding:
        state = WindowState(view)
        state.load(table)
        return state.segment_table(segment)
    starts = table.column(WINDOW_START).to_numpy()
    return table.filter(pa.array(starts - starts % view.segment_ms == segment))


def split_task(
    store: ObjectStore, views: Sequence[View], key_field: str, task: TaskId, term: int = 0
) -> tuple[TaskId, TaskId]:
    """Split ``task`` (stopped at its checkpoint) into its two children; their ids. With no
    checkpoint there is nothing to carry: the children start where a new task would.
    ``term``: the coordinator's lease term (:class:`~pipelines.segments.RewriteFenced` if a
    higher one rewrote these views)."""
    low_id, high_id = (TaskId(task.topic, task.partition, b, f) for b, f in children(*task.where))
    parent = load_checkpoint(store, task.topic, task.partition, *task.where)
    if parent is None:
        return low_id, high_id
    current = _current_views(parent, views)
    _check_term(store, current.values(), term)
    _check_not_holding(task, parent)
    if any(parent.pending.values()):
        raise RebucketError(f"{task} holds session events: it is not split")
    low_states: dict[str, bytes] = {}
    high_states: dict[str, bytes] = {}
    tables: dict[str, tuple[pa.Table, pa.Table, pa.Table]] = {}
    for name, view in current.items():
        table = read_parquet(parent.states[name])
        if key_field in view.grouping_cols and table.num_rows:
            hashes = value_hashes(table.column(key_field).to_pylist())
            high = hashes % np.uint64(high_id.factor) == np.uint64(high_id.bucket)
            low_table, high_table = table.filter(pa.array(~high)), table.filter(pa.array(high))
        else:
            low_table, high_table = table, table.slice(0, 0)
        tables[name] = (table, low_table, high_table)
        low_states[name], high_states[name] = to_parquet(low_table), to_parquet(high_table)
    common = {
        "topic": task.topic,
        "partition": task.partition,
        "next_offset": parent.next_offset,
        "watermark": parent.watermark,
        "generation": parent.generation,
        "skips": parent.skips,
    }
    low = TaskCheckpoint(
        **common,
        consumed=parent.consumed,
        dead_lettered=dict(parent.dead_lettered),
        type_errors=parent.type_errors,
        views={name: dict(parent.views[name]) for name in current},
        states=low_states,
        bucket=low_id.bucket,
        factor=low_id.factor,
    )
    high = TaskCheckpoint(
        **common,
        consumed=0,
        dead_lettered={},
        views={
            name: {"fingerprint": view.fingerprint, "processed": 0, "late": 0}
            for name, view in current.items()
        },
        states=high_states,
        bucket=high_id.bucket,
        factor=high_id.factor,
    )
    _discard_ahead(store, task, parent)
    listing = _RealtimeFiles(store)
    for name, (table, low_table, high_table) in tables.items():
        view = current[name]
        rewrite = RealtimeRewrite(store, view.name, term)
        held = _segments(view, table, parent.watermark).tolist()
        for segment in held:
            new = {}
            for child, rows in ((low_id, low_table), (high_id, high_table)):
                part = _rows_of(view, rows, segment)
                if part.num_rows:
                    new[_realtime(view, segment, child)] = to_parquet(part)
            rewrite.move(segment, [_realtime(view, segment, task)], new)
        ahead = _files_ahead(view, listing.of(view, task), parent, set(held))
        for segment, key in ahead.items():
            rewrite.move(segment, [key], {})
        rewrite.commit()
        _record(store, view, sorted({*held, *ahead}), low_id, parent.generation)
    save_checkpoint(store, low)  # after the rewrites: a refused one leaves no checkpoint either
    save_checkpoint(store, high)
    log.info("split %s at offset %d into %s and %s", task, parent.next_offset, low_id, high_id)
    return low_id, high_id


def merge_tasks(
    store: ObjectStore, views: Sequence[View], low_id: TaskId, high_id: TaskId, term: int = 0
) -> TaskId:
    """Merge two sibling tasks (both stopped at their checkpoints) into their parent; its id.
    ``term``: the coordinator's lease term, as for :func:`split_task`."""
    if low_id.factor != high_id.factor or high_id.bucket != low_id.bucket + low_id.factor // 2:
        raise RebucketError(f"{low_id} and {high_id} are not the two children of one task")
    merged_id = TaskId(low_id.topic, low_id.partition, low_id.bucket, low_id.factor // 2)
    pair = [load_checkpoint(store, t.topic, t.partition, *t.where) for t in (low_id, high_id)]
    if pair[0] is None and pair[1] is None:
        return merged_id
    if pair[0] is None or pair[1] is None:
        missing = low_id if pair[0] is None else high_id
        raise RebucketError(f"cannot merge into {merged_id}: {missing} has no checkpoint")
    low, high = pair
    start = min(low.next_offset, high.next_offset)
    skips = {*low.skips, *high.skips}
    for child, checkpoint in ((low_id, low), (high_id, high)):
        if checkpoint.next_offset > start:
            skips.add((child.bucket, child.factor, checkpoint.next_offset))
    currents = [_current_views(c, views) for c in pair]
    _check_term(store, [*currents[0].values(), *currents[1].values()], term)
    watermark = max(c.watermark for c in pair if c.next_offset == start)
    for child, checkpoint in ((low_id, low), (high_id, high)):
        _check_not_holding(child, checkpoint)
    listing = _RealtimeFiles(store)
    for child, checkpoint, current in zip((low_id, high_id), pair, currents, strict=True):
        for view in current.values():
            reopened = _reopened(view, listing.of(view, child), checkpoint, watermark)
            if reopened:
                raise RebucketError(
                    f"cannot merge into {merged_id} yet: {child} is ahead in event time and "
                    f"closed {len(reopened)} segment(s) of view {view.name} that the merged "
                    "task would open again; merged once the buckets are closer"
                )
    for child, checkpoint in ((low_id, low), (high_id, high)):
        _discard_ahead(store, child, checkpoint)
    names = sorted(set(currents[0]) | set(currents[1]))
    states: dict[str, bytes] = {}
    counters: dict[str, dict] = {}
    for name in names:
        view = currents[0].get(name) or currents[1][name]
        state = WindowState(view)
        counters[name] = {"fingerprint": view.fingerprint, "processed": 0, "late": 0}
        for checkpoint, current in zip(pair, currents, strict=True):
            if name in current:
                state.load(read_parquet(checkpoint.states[name]))
                counters[name]["processed"] += checkpoint.views[name]["processed"]
                counters[name]["late"] += checkpoint.views[name]["late"]
        table = state.all_table()
        states[name] = to_parquet(table)
        new = {
            segment: {_realtime(view, segment, merged_id): to_parquet(state.segment_table(segment))}
            for segment in _segments(view, table, watermark).tolist()
        }
        old: dict[int, list[str]] = {}
        for child, checkpoint, current in zip((low_id, high_id), pair, currents, strict=True):
            if name in current:
                held = _segments(
                    view, read_parquet(checkpoint.states[name]), checkpoint.watermark
                ).tolist()
                for segment in held:
                    old.setdefault(segment, []).append(_realtime(view, segment, child))
                ahead = _files_ahead(view, listing.of(view, child), checkpoint, set(held))
                for segment, key in ahead.items():
                    old.setdefault(segment, []).append(key)
        rewrite = RealtimeRewrite(store, view.name, term)
        for segment in sorted(set(new) | set(old)):
            rewrite.move(segment, old.get(segment, []), new.get(segment, {}))
        rewrite.commit()
        moved = sorted(set(new) | set(old))
        _record(store, view, moved, merged_id, max(low.generation, high.generation))
    dead = dict(low.dead_lettered)
    for reason, n in high.dead_lettered.items():
        dead[reason] = dead.get(reason, 0) + n
    merged = TaskCheckpoint(
        topic=merged_id.topic,
        partition=merged_id.partition,
        next_offset=start,
        watermark=watermark,
        consumed=low.consumed + high.consumed,
        dead_lettered=dead,
        type_errors=(
            TypeErrors.from_json(low.type_errors) + TypeErrors.from_json(high.type_errors)
        ).as_json(),
        views=counters,
        states=states,
        generation=max(low.generation, high.generation),
        bucket=merged_id.bucket,
        factor=merged_id.factor,
        skips=tuple(sorted(skips)),
    )
    save_checkpoint(store, merged)
    log.info(
        "merged %s (offset %d) and %s (offset %d) into %s at offset %d",
        low_id,
        low.next_offset,
        high_id,
        high.next_offset,
        merged_id,
        start,
    )
    return merged_id


def _record(
    store: ObjectStore, view: View, segments: list[int], task: TaskId, generation: int
) -> None:
    """Tell the publisher these segments' files moved, once the old files are gone: a pass
    that read them mid-rewrite is then followed by one that reads them settled."""
    if segments:
        record_change(
            store, view.name, segments, task.topic, task.partition, generation, *task.where
        )


def _check_not_holding(task: TaskId, checkpoint: TaskCheckpoint) -> None:
    """Refuse, before anything is written, a task whose checkpoint was taken while it held
    realtime files an earlier owner wrote past it: segments that closed meanwhile keep files
    with events past the checkpoint, which new tasks would count again. Once the task's
    replay passes those offsets, its files match its state and it can be split or merged."""
    if checkpoint.replay_until > checkpoint.next_offset:
        raise RebucketError(
            f"{task} holds realtime files written past its checkpoint (to offset "
            f"{checkpoint.replay_until}, checkpoint at {checkpoint.next_offset}): it is split "
            "or merged once its replay passes them"
        )


def _discard_ahead(store: ObjectStore, task: TaskId, checkpoint: TaskCheckpoint) -> None:
    """Remove the archive ranges ``task`` wrote past its checkpoint (an owner that died
    after a flush and before its next checkpoint): the new tasks archive those records again
    from the checkpoint, and a range left behind would name files a later task of the same
    name overwrites."""
    discard_uncommitted(
        store,
        task.topic,
        task.partition,
        checkpoint.next_offset,
        *task.where,
        counted_until(*task.where, checkpoint.skips),
    )


def _files_ahead(
    view: View, files: dict[int, str], checkpoint: TaskCheckpoint, held: set[int]
) -> dict[int, str]:
    """``task``'s realtime files of ``view`` that only events past its checkpoint made: of
    segments its checkpoint's state does not hold and its watermark has not closed (a closed
    segment's file holds partials no new task counts again; an open one's, the events the new
    tasks count again from the checkpoint, so it must go or they count twice)."""
    return {
        segment: key
        for segment, key in files.items()
        if segment not in held and not _closed(view, segment, checkpoint.watermark)
    }


class _RealtimeFiles:
    """The tasks' realtime files of each view, by segment, listed once per view and split or
    merge (a listing covers every hour of every task of the view)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.listed: dict[str, dict[str, dict[int, str]]] = {}

    def of(self, view: View, task: TaskId) -> dict[int, str]:
        """``task``'s realtime files of ``view``, by segment."""
        if view.name not in self.listed:
            prefix = view_prefix(view.name)
            by_name: dict[str, dict[int, str]] = {}
            for key in self.store.list(prefix):
                parts = key[len(prefix) :].split("/")
                if len(parts) == 3 and parts[1] == "realtime":
                    by_name.setdefault(parts[2], {})[parse_hour_label(parts[0])] = key
            self.listed[view.name] = by_name
        name = realtime_key(view.name, 0, task.topic, task.partition, *task.where)
        return self.listed[view.name].get(name.rsplit("/", 1)[1], {})


def _check_term(store: ObjectStore, views: Iterable[View], term: int) -> None:
    """Refuse early, before any checkpoint is written, a rewrite a higher term has fenced
    (an early answer only: the rewrite's commit is what the fence is checked on)."""
    for view in views:
        record, _ = read_rewrite_record(store, view.name)
        if record is not None and record.term > term:
            raise RewriteFenced(view.name, term, record.term)


def _realtime(view: View, segment: int, task: TaskId) -> str:
    return realtime_key(view.name, segment, task.topic, task.partition, *task.where)
