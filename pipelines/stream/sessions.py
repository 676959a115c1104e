"""Per-task session state of one session view: open sessions per key, closed by event time.

Sessions are cut in event-time order, so out-of-order events must be ordered first. An
accepted event waits in a pending buffer until no event the task may still accept can come
before it: events are accepted while ``event_time >= prior watermark - allowed_lateness``, so
once the watermark reaches ``W`` every event before ``W - allowed_lateness`` (the *settled
frontier*) is final. Settled events are folded in, per key in (event time, offset) order: an
event joins its key's open session if it comes less than ``gap`` after the session's last
event and less than ``max_duration`` after its first, and starts a new session otherwise. A
session is closed once the frontier passes ``min(last + gap, first + max_duration)``: no
event still to come can join it. Open sessions wait for that in a heap of deadlines, so
closing never scans every session (Optimizely's in-memory index of pending sessions).

Every decision depends only on event times and the partition's order, never on when polls,
flushes or checkpoints happened, so a replay after a crash rewrites identical sessions.

Sessions are bucketed by the hour they started in (their segment). A flush folds in what is
settled and rewrites the realtime segment of every bucket that changed: full snapshots, open
sessions marked open. A closed session drops its live aggregator states at once and keeps
only its serialized row until the next flush has written it; then it leaves memory, and later
rewrites of its segment carry its row over from the segment's current file
(:meth:`SessionState.segment_table` with ``previous``). Sessions are never merged or removed,
so a row of the file that memory lacks is a closed session (or, after a crash, one the replay
will write again identically). The bucket itself leaves memory once the frontier has passed
its hour and none of its sessions is open.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.aggregators.nulls import NullMasks, with_nulls
from pipelines.archive.schema import arrow_type
from pipelines.events.declaration import EVENT_TIME, ColumnType
from pipelines.events.decode import NO_WATERMARK, DecodedBatch
from pipelines.segments import segment_schema, state_column, written_for
from pipelines.stream.state import fold_groups, null_masks
from pipelines.views.model import (
    EVENT_COUNT,
    KEPT_DROPPED,
    KEPT_EVENTS,
    OPEN,
    SESSION_END,
    SESSION_START,
    View,
)
from pipelines.views.topics import declaration_of

__all__ = ["SessionState", "kept_event_type", "session_table_schema"]

_OFFSET = "__offset"
_NULL = "__null:"
"""Prefix of a pending column that masks the nulls of a long, double or boolean column (a
string's are None in the column itself)."""
SETTLE_AT_PENDING = 200_000
"""Pending events beyond this are folded in before the next flush, to bound memory."""


class _Session:
    """An open session: its bounds, live aggregator states and kept events."""

    __slots__ = ("count", "dropped", "end", "kept", "start", "states")

    def __init__(self, start: int, states: list[Any]) -> None:
        self.start = start
        self.end = start
        self.count = 0
        self.states = states
        self.kept: list[Any] = []
        """(event_time, *kept_fields) of the first events, as :func:`kept_event_type` structs
        (smaller than dicts, and written as JSON objects in one C call)."""
        self.dropped = 0


def session_table_schema(view: View) -> pa.Schema:
    """Columns of a realtime session segment (and of a session view's checkpoint state)."""
    fields = view.session_fields(pa.int64())
    fields += [pa.field(state_column(a.out), pa.binary()) for a in view.aggregators]
    return segment_schema(fields, view.name, view.fingerprint, "session")


class SessionState:
    """The sessions of one session view in one task, plus its processed/late counters (a
    :class:`~pipelines.stream.view_state.ViewState`). Closed sessions leave memory after a
    flush, so a segment's rewrite reads its file first."""

    def __init__(self, view: View) -> None:
        if view.session is None:
            raise ValueError(f"view {view.name} is not a session view")
        self.view = view
        self.spec = view.session
        self.aggregators = view.aggregators
        self.columns = sorted(
            {self.spec.key, *self.spec.kept_fields}
            | {c for a in self.aggregators for c in a.columns_read()} - {"event_time"}
        )
        declaration = declaration_of(view)
        self._nullable = declaration.nullable_columns()
        declared = self._declared = declaration.columns()
        self._masked = [
            c for c in self.columns if c in (self._nullable or ()) and declared[c] != "string"
        ]
        """The nullable non-string columns whose null masks are kept beside pending events."""
        self._kept_names = ("event_time", *self.spec.kept_fields)
        self._kept_type = kept_event_type(self._kept_names)
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_rows = 0
        self.open: dict[str, _Session] = {}
        """The open session of each key."""
        self.buckets: dict[int, dict[tuple[str, int], _Session | tuple]] = {}
        """Per segment (start hour): (key, start) -> an open session, or a closed one's row."""
        self.open_in: dict[int, int] = {}
        """Per segment: how many of its sessions are open."""
        self.deadlines: list[tuple[int, str, int]] = []
        """Heap of (close deadline, key, start); stale entries are skipped when popped."""
        self.frontier = NO_WATERMARK
        self._segment_ms = view.segment_ms
        self.dirty: set[int] = set()
        self._open_rows: dict[tuple[str, int], tuple] = {}
        """Rows of open sessions written since sessions last changed: a checkpoint's flush
        serializes them for the segment tables and its state reuses them (settle, the only
        place sessions change, forgets them, and so do a flush without a checkpoint and
        :meth:`all_table`, so they are never held between flushes)."""
        self.processed = 0
        self.late = 0

    # --- events in -----------------------------------------------------------------------

    def update(self, batch: DecodedBatch) -> None:
        """Buffer a batch's in-time events; an event behind the watermark by more than the
        allowed lateness is late (its place in a session may already be final)."""
        if not len(batch):
            return
        times = batch.columns["event_time"]
        late = times < batch.prior_watermark - self.view.allowed_lateness_ms
        passed = None
        if self.view.filter is not None:  # an event the where: drops is processed, not late
            masks = null_masks(self.view, batch)
            passed = self.view.filter.mask(
                with_nulls(batch.columns, masks, self.view.filter.fields)
            )
            late &= passed
        n_late = int(late.sum())
        self.late += n_late
        self.processed += len(times) - n_late
        keep: Any = ~late if n_late else slice(None)
        if passed is not None:
            keep = passed & ~late
        part = {c: batch.columns[c][keep] for c in self.columns}
        for c in self._masked:
            null = batch.nulls.get(c)
            part[_NULL + c] = np.zeros(len(times), bool)[keep] if null is None else null[keep]
        part["event_time"] = times[keep]
        part[_OFFSET] = batch.offsets[keep]
        n = len(part["event_time"])
        if not n:
            return
        self.pending.append(part)
        self.pending_rows += n
        if self.pending_rows >= SETTLE_AT_PENDING:
            self.settle(batch.watermark)

    def settle(self, watermark: int) -> None:
        """Fold in every pending event before the settled frontier, then close the sessions
        no later event can join. Called before every flush."""
        if watermark == NO_WATERMARK:
            return
        frontier = watermark - self.view.allowed_lateness_ms
        if frontier <= self.frontier:
            return
        self.frontier = frontier
        self._open_rows.clear()  # sessions may change from here on
        if self.pending:
            rows = _concat(self.pending)
            ready = rows["event_time"] < frontier
            if ready.all():
                settled, self.pending = rows, []
            else:
                waiting = ~ready
                settled = {c: v[ready] for c, v in rows.items()}
                self.pending = [{c: v[waiting] for c, v in rows.items()}]
            self.pending_rows = sum(len(p["event_time"]) for p in self.pending)
            if len(settled["event_time"]):
                self._fold(settled)
        self._close_due(frontier)

    def _fold(self, rows: dict[str, np.ndarray]) -> None:
        """Settled events into sessions, per key in (event time, offset) order."""
        spec = self.spec
        codes, uniques = pd.factorize(rows[spec.key])
        order = np.lexsort((rows[_OFFSET], rows["event_time"], codes))
        codes = codes[order]
        times = rows["event_time"][order]
        inputs = [
            None if (values := a.inputs(rows)) is None else values[order] for a in self.aggregators
        ]
        masks = NullMasks(rows, {c: rows[_NULL + c] for c in self._masked}, self._nullable)
        wheres = [
            None if (m := a.rows(rows, masks)) is None else m[order] for a in self.aggregators
        ]
        kept = [self._kept_values(rows, c, order) for c in spec.kept_fields]  # per session
        # Pieces: runs of one key with no gap as long as the inactivity gap, found in one
        # pass; a piece that outlasts max_duration, or that may join the key's open session,
        # is cut by :meth:`_pieces` (rare, or once per key that has an open session).
        n = len(times)
        new_key = np.empty(n, dtype=bool)
        new_key[0] = True
        np.not_equal(codes[1:], codes[:-1], out=new_key[1:])
        gap_break = new_key.copy()
        gap_break[1:] |= np.diff(times) >= spec.gap_ms
        heads = np.flatnonzero(gap_break)
        ends = np.append(heads[1:], n)
        long = (times[ends - 1] - times[heads] >= spec.max_duration_ms).tolist()
        # Each session's piece first (its bounds, kept events, deadline), then every
        # aggregation over all the pieces at once; a session closed on the way is written as
        # a row only once its states hold its piece.
        sessions: list[_Session] = []
        starts: list[int] = []
        closed: list[tuple[str, _Session]] = []
        labels = uniques.tolist() if isinstance(uniques, np.ndarray) else list(uniques)
        stamps = times.tolist()
        keys = codes[heads].tolist()
        firsts = new_key[heads].tolist()
        key = ""
        for i, (a, b) in enumerate(zip(heads.tolist(), ends.tolist(), strict=True)):
            if firsts[i]:
                key = labels[keys[i]]
                key = key if type(key) is str else str(key)
            if long[i] or (firsts[i] and key in self.open):
                pieces = self._pieces(key, times, a, b, firsts[i])
            else:
                pieces = ((a, b),)
            for lo, hi in pieces:
                session = self._place(key, stamps, kept, lo, hi, closed)
                if sessions and sessions[-1] is session:
                    continue  # the same session's next rows: one piece
                sessions.append(session)
                starts.append(lo)
        fold_groups(
            self.aggregators,
            [session.states for session in sessions],
            inputs,
            wheres,
            times,
            np.array(starts, dtype=np.int64),
        )
        self._close_rows(closed)

    def _kept_values(self, rows: dict[str, np.ndarray], column: str, order: np.ndarray) -> list:
        """A kept field's values in ``order``: None where it is null (not the 0 it holds)."""
        values = rows[column][order].tolist()
        if column not in self._masked:
            return values
        null = rows[_NULL + column][order].tolist()
        return [None if missing else v for v, missing in zip(values, null, strict=True)]

    def _pieces(
        self, key: str, times: np.ndarray, a: int, b: int, first: bool
    ) -> Iterable[tuple[int, int]]:
        """Index ranges of one run of a key's settled events (no gap in it as long as the
        inactivity gap) that each belong to one session: the run joins the key's open session
        if it is the key's ``first`` run and close enough, and is cut wherever a session
        would outlast max_duration."""
        spec = self.spec
        start = int(times[a])
        current = self.open.get(key)
        if first and current is not None and self._joins(current, start):
            start = current.start
        if int(times[b - 1]) - start < spec.max_duration_ms:
            yield a, b
            return
        # The run outlasts max_duration: cut it event by event (rare, so Python is fine).
        piece = a
        for i in range(a, b):
            if int(times[i]) - start >= spec.max_duration_ms:
                if i > piece:
                    yield piece, i
                piece, start = i, int(times[i])
        yield piece, b

    def _joins(self, session: _Session, t: int) -> bool:
        return t - session.end < self.spec.gap_ms and t - session.start < self.spec.max_duration_ms

    def _place(
        self,
        key: str,
        times: list[int],
        kept: list[list[Any]],
        a: int,
        b: int,
        closed: list[tuple[str, _Session]],
    ) -> _Session:
        """Events ``a:b`` (sorted, one session's) into the key's open session or a new one:
        its bounds, count and kept events (its aggregations are the caller's). A session
        this closes is appended to ``closed``, its row still to be written."""
        t0 = times[a]
        session = self.open.get(key)
        if session is not None and not self._joins(session, t0):
            self._close(key, session, closed)
            session = None
        if session is None:
            session = self.open[key] = _Session(t0, [g.initialize() for g in self.aggregators])
            segment = self._segment(t0)
            self.buckets.setdefault(segment, {})[(key, t0)] = session
            self.open_in[segment] = self.open_in.get(segment, 0) + 1
        n = b - a
        if kept:
            take = min(self.spec.max_kept_events - len(session.kept), n)
            if take > 0:
                columns = [times[a : a + take], *(c[a : a + take] for c in kept)]
                session.kept += map(self._kept_type, *columns)
            session.dropped += n - max(take, 0)
        session.count += n
        session.end = times[b - 1]
        deadline = min(session.end + self.spec.gap_ms, session.start + self.spec.max_duration_ms)
        heapq.heappush(self.deadlines, (deadline, key, session.start))
        self.dirty.add(self._segment(session.start))
        return session

    def _close_due(self, frontier: int) -> None:
        heap = self.deadlines
        closed: list[tuple[str, _Session]] = []
        while heap and heap[0][0] <= frontier:
            deadline, key, start = heapq.heappop(heap)
            session = self.open.get(key)
            if session is None or session.start != start:
                continue  # closed already
            current = min(session.end + self.spec.gap_ms, session.start + self.spec.max_duration_ms)
            if current == deadline:
                self._close(key, session, closed)
        self._close_rows(closed)

    def _close(self, key: str, session: _Session, closed: list[tuple[str, _Session]]) -> None:
        """No longer open: appended to ``closed``, whose rows the caller writes in one batch
        (:meth:`_close_rows`) once its last events are folded into its states."""
        del self.open[key]
        segment = self._segment(session.start)
        self.open_in[segment] -= 1
        self.dirty.add(segment)
        closed.append((key, session))

    def _close_rows(self, closed: list[tuple[str, _Session]]) -> None:
        """Keep only the closed sessions' rows: their live states leave memory now."""
        for row in self._rows_of(closed, False):
            self.buckets[self._segment(row[1])][(row[0], row[1])] = row

    def _segment(self, t: int) -> int:
        return t - t % self._segment_ms

    # --- segments and eviction -------------------------------------------------------------

    def closed_segments(self, watermark: int) -> list[int]:
        """Buckets no in-time event can change: the frontier is past their hour (no new
        session can start there) and none of their sessions is open."""
        frontier = watermark - self.view.allowed_lateness_ms
        return [
            s
            for s in self.buckets
            if s + self.view.segment_ms <= min(frontier, self.frontier) and not self.open_in.get(s)
        ]

    def evict(self, segments: Iterable[int]) -> None:
        for segment in segments:
            self.buckets.pop(segment, None)
            self.open_in.pop(segment, None)
            self.dirty.discard(segment)

    @property
    def open_sessions(self) -> int:
        return len(self.open)

    # --- serialization -------------------------------------------------------------------

    def _rows_of(self, sessions: list[tuple[str, _Session]], is_open: bool) -> list[tuple]:
        """The rows of ``(key, session)`` pairs, built a column at a time (each a C-level map
        over the sessions) rather than a Python step per session and field."""
        if not sessions:
            return []
        held = [session for _, session in sessions]
        states = list(map(_STATES, held))
        return list(
            zip(
                [key for key, _ in sessions],
                list(map(_START, held)),
                list(map(_END, held)),
                list(map(_COUNT, held)),
                repeat(is_open, len(held)),
                list(map(bytes.decode, map(_encode, map(_KEPT, held)))),
                list(map(_DROPPED, held)),
                *(
                    list(map(agg.serialize, map(itemgetter(j), states)))
                    for j, agg in enumerate(self.aggregators)
                ),
                strict=True,
            )
        )

    def _rows(self, items: Iterable[tuple[tuple[str, int], _Session | tuple]]) -> list[tuple]:
        memo = self._open_rows
        rows = []
        fresh: list[tuple[str, _Session]] = []
        for key, item in items:
            if isinstance(item, tuple):
                rows.append(item)
                continue
            row = memo.get(key)
            if row is None:
                fresh.append((key[0], item))
            else:
                rows.append(row)
        for row in self._rows_of(fresh, True):
            memo[(row[0], row[1])] = row
            rows.append(row)
        return rows

    def segment_table(
        self, segment: int, current: Callable[[], pa.Table | None] | None = None
    ) -> pa.Table:
        """One bucket as a realtime segment table: every session that started in its hour,
        those that already left memory taken from the segment's ``current`` file."""
        previous = current() if current is not None else None
        items = dict(self.buckets.get(segment, {}))
        rows = self._rows(items.items())
        if previous is not None and previous.num_rows and self._same_definition(previous):
            keys = zip(
                previous.column(self.spec.key).to_pylist(),
                previous.column(SESSION_START).to_pylist(),
                strict=True,
            )
            carried = [i for i, key in enumerate(keys) if key not in items]
            if carried:
                old = previous.select(session_table_schema(self.view).names).take(carried)
                rows += list(zip(*(c.to_pylist() for c in old.columns), strict=True))
        return self._table(sorted(rows, key=lambda r: (r[0], r[1])))

    def _same_definition(self, table: pa.Table) -> bool:
        return written_for(table.schema, self.view.fingerprint)

    def flushed(self, checkpoint: bool = False) -> None:
        """The dirty buckets' files are written: their closed sessions leave memory, and the
        open ones' rows too unless a ``checkpoint``'s :meth:`all_table` follows."""
        if not checkpoint:
            self._open_rows.clear()
        for segment in self.dirty:
            bucket = self.buckets.get(segment)
            if bucket:
                for key in [k for k, v in bucket.items() if isinstance(v, tuple)]:
                    del bucket[key]
        self.dirty.clear()

    def all_table(self) -> pa.Table:
        items = (item for bucket in self.buckets.values() for item in bucket.items())
        table = self._table(self._rows(items))
        self._open_rows.clear()  # not held in memory until the next flush
        return table

    def _table(self, rows: list[tuple]) -> pa.Table:
        schema = session_table_schema(self.view)
        columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
        return pa.Table.from_arrays(
            [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=True)],
            schema=schema,
        )

    def pending_table(self) -> pa.Table:
        """Accepted events not settled yet (checkpointed beside the sessions)."""
        rows = _concat(self.pending) if self.pending else {}
        names = ["event_time", _OFFSET, *self.columns, *(_NULL + c for c in self._masked)]
        return pa.table(
            {n: pa.array(rows.get(n, []), type=_arrow_type(n, self._declared)) for n in names}
        )

    def load(self, table: pa.Table, pending: pa.Table | None = None) -> None:
        """Restore from :meth:`all_table` and :meth:`pending_table` output (a checkpoint)."""
        key_col = self.spec.key
        self._open_rows.clear()
        names = table.schema.names
        for values in zip(*(table.column(n).to_pylist() for n in names), strict=True):
            row = dict(zip(names, values, strict=True))
            key, start = row[key_col], row[SESSION_START]
            segment = self._segment(start)
            bucket = self.buckets.setdefault(segment, {})
            if not row[OPEN]:
                bucket[(key, start)] = tuple(values)
                self.open_in.setdefault(segment, 0)
                continue
            states = [agg.deserialize(row[state_column(agg.out)]) for agg in self.aggregators]
            session = _Session(start, states)
            session.end = row[SESSION_END]
            session.count = row[EVENT_COUNT]
            session.kept = msgspec.json.decode(row[KEPT_EVENTS], type=list[self._kept_type])
            session.dropped = row[KEPT_DROPPED]
            bucket[(key, start)] = self.open[key] = session
            self.open_in[segment] = self.open_in.get(segment, 0) + 1
            deadline = min(session.end + self.spec.gap_ms, start + self.spec.max_duration_ms)
            heapq.heappush(self.deadlines, (deadline, key, start))
        if pending is not None and pending.num_rows:
            part = {n: _numpy(pending.column(n)) for n in pending.schema.names}
            self.pending = [part]
            self.pending_rows = pending.num_rows


_encode = msgspec.json.Encoder().encode
_START, _END, _COUNT = attrgetter("start"), attrgetter("end"), attrgetter("count")
_KEPT, _DROPPED, _STATES = attrgetter("kept"), attrgetter("dropped"), attrgetter("states")


def kept_event_type(names: tuple[str, ...]) -> type:
    """A kept event: a struct of ``names`` in that order, which msgspec writes as the JSON
    object orjson writes of the same dict, byte for byte (what the Spark correction writes)."""
    return msgspec.defstruct("KeptEvent", [(n, Any) for n in names], gc=False)


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def _arrow_type(name: str, declared: dict[str, ColumnType]) -> pa.DataType:
    """A pending column's type: the declared column's archive type (a decoded batch holds it
    so)."""
    if name.startswith(_NULL):
        return pa.bool_()
    if name in (_OFFSET, EVENT_TIME):
        return pa.int64()
    return arrow_type(declared[name])


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_boolean(column.type):
        return column.to_numpy().astype(bool)
    if pa.types.is_integer(column.type):
        return column.to_numpy().astype(np.int64)
    if pa.types.is_floating(column.type):
        return column.to_numpy().astype(np.float64)
    return np.array(column.to_pylist(), dtype=object)
