"""Split and merge rewrites of realtime files that every reader sees whole, fenced by the
coordinator's lease term.

A split or merge moves an open segment's rows from the old tasks' files to the new tasks'
(:mod:`pipelines.stream.rebucket`). No store here has a transaction over several objects, so
the move is made visible by ONE write, of the view's *rewrite record*
(``rewrites/<view>.json``, :func:`rewrite_record_key`), which names, per segment, the old
files and the new ones:

1. stage: the new files are written under ``rewrites/<view>/<rewrite id>/`` (no reader lists
   there);
2. commit: the record, state ``committed``, is written by a compare-and-swap on its previous
   version (:meth:`~pipelines.storage.ObjectStore.put_if`) that is refused if a higher lease
   term wrote the record before (:class:`RewriteFenced`);
3. finish: the new files are copied to their final names, the old files deleted, the record
   swapped to ``finished`` (with the same compare-and-swap), then the staged files removed.

Readers go through :func:`read_realtime`. While a record is ``committed`` they apply it: of
its segments they take the listed files minus the old ones plus the new ones (the final name
if it is there, else the staged copy), so a finish half done reads as done. Once it is
``finished`` (or there is none) they take what is listed. They read the record's version
before and after listing and reading; if it changed, or a file vanished under them, they read
again, until ``wait_s`` has passed (:class:`RewriteUnsettled`). Why that is enough: while the
record holds one version, nothing a rewrite touches changes but step 3's copies and deletes of
a committed record, which the readers already apply. So every reader sees all of a segment's
files from before a rewrite or all from after, never a mix and never neither.

Fencing: every record carries the highest lease term that wrote it. A new coordinator calls
:func:`fence` once per term before its first step, raising the term of every view's record
(and finishing a committed rewrite it finds: the step semantics of
:mod:`orchestration.control_plane.fleet.rebucketing`, a step once made visible is finished by
whoever leads next). A former leader paused before its commit then has the commit refused,
and it wrote nothing any reader looks at. One paused after its commit stops at its next
step of 3, which checks the record still names its rewrite and no higher term.

Only one coordinator rewrites at a time (the lease), so one record per view is enough: a
record found ``committed`` by another rewrite is finished before the next one commits.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from pipelines.exceptions import SluiceError
from pipelines.segments.layout import realtime_prefix, view_prefix
from pipelines.segments.time import hour_label, parse_hour_label
from pipelines.storage import ObjectStore

__all__ = [
    "COMMITTED",
    "FINISHED",
    "REWRITES_PREFIX",
    "RealtimeRewrite",
    "RewriteFenced",
    "RewriteRecord",
    "RewriteUnsettled",
    "fence",
    "read_realtime",
    "read_rewrite_record",
    "rewrite_record_key",
]

log = logging.getLogger(__name__)

REWRITES_PREFIX = "rewrites/"
COMMITTED = "committed"
FINISHED = "finished"
SWAP_ATTEMPTS = 20
"""Compare-and-swaps of one record lost to other writers before giving up (only a coordinator
and a paused former one write it: one loss is rare, twenty is a fault)."""
READ_WAIT_S = 30.0
"""How long a reader tries again while rewrites keep changing the record under it."""


class RewriteFenced(SluiceError):
    """A split or merge rewrite carried a lease term lower than the one that last wrote the
    view's rewrite record: it comes from a former coordinator, so it is refused and writes
    nothing readers see."""

    def __init__(self, view: str, term: int, newer: int) -> None:
        super().__init__(
            f"rewrite of {view}'s realtime files under coordinator term {term} refused: "
            f"term {newer} wrote after it (a newer coordinator leads)"
        )
        self.view = view
        self.term = term
        self.newer = newer


class RewriteUnsettled(SluiceError):
    """A reader kept seeing a view's rewrite record change for longer than it may wait."""


def rewrite_record_key(view: str) -> str:
    return f"{REWRITES_PREFIX}{view}.json"


def _staged_key(view: str, rewrite_id: str, final_key: str) -> str:
    return f"{REWRITES_PREFIX}{view}/{rewrite_id}/{final_key}"


@dataclass(frozen=True)
class Move:
    """One segment's part of a rewrite."""

    old: tuple[str, ...]
    """Files that go (the old tasks')."""
    new: dict[str, str]
    """Final key -> staged key of the files that come (the new tasks')."""


@dataclass(frozen=True)
class RewriteRecord:
    view: str
    term: int
    rewrite_id: str
    state: str
    moves: dict[int, Move] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "view": self.view,
                "term": self.term,
                "rewrite_id": self.rewrite_id,
                "state": self.state,
                "moves": {
                    hour_label(s): {"old": list(m.old), "new": m.new}
                    for s, m in sorted(self.moves.items())
                },
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RewriteRecord:
        raw = json.loads(data)
        moves = {
            parse_hour_label(label): Move(tuple(m["old"]), dict(m["new"]))
            for label, m in raw["moves"].items()
        }
        return cls(raw["view"], int(raw["term"]), raw["rewrite_id"], raw["state"], moves)


def read_rewrite_record(store: ObjectStore, view: str) -> tuple[RewriteRecord | None, str | None]:
    """The view's rewrite record and its version (None, None if it has none)."""
    found = store.get_versioned(rewrite_record_key(view))
    if found is None:
        return None, None
    return RewriteRecord.from_json(found[0]), found[1]


def _swap(store: ObjectStore, view: str, term: int, change) -> RewriteRecord | None:
    """Compare-and-swap the record to ``change(current)`` (None: leave it), refused if a
    higher term wrote it; a committed rewrite of another id is finished first (rolled
    forward). The record written, or None."""
    key = rewrite_record_key(view)
    for _ in range(SWAP_ATTEMPTS):
        current, version = read_rewrite_record(store, view)
        if current is not None and current.term > term:
            raise RewriteFenced(view, term, current.term)
        new = change(current)
        if new is None:
            return None
        if (
            current is not None
            and current.state == COMMITTED
            and current.rewrite_id != new.rewrite_id
        ):
            _finish(store, current, term)
            continue
        if store.put_if(key, new.to_json(), version):
            return new
    raise SluiceError(f"{view}'s rewrite record changed {SWAP_ATTEMPTS} times under one swap")


def fence(store: ObjectStore, views: Iterable[str], term: int) -> None:
    """Raise every view's record to lease term ``term`` (finishing a committed rewrite found
    there), so that no rewrite of a lower term commits from now on; :class:`RewriteFenced`
    if a higher term already did."""
    for view in views:

        def raised(current: RewriteRecord | None, view: str = view) -> RewriteRecord | None:
            if current is None:
                return RewriteRecord(view, term, f"fence-t{term}", FINISHED)
            if current.term >= term and current.state == FINISHED:
                return None
            return replace(current, term=term)

        record = _swap(store, view, term, raised)
        if record is not None and record.state == COMMITTED:
            _finish(store, record, term)


class RealtimeRewrite:
    """One view's split or merge of realtime files: :meth:`move` each segment (stages the new
    files), then :meth:`commit` (one fenced write makes them visible) and finish."""

    def __init__(self, store: ObjectStore, view: str, term: int) -> None:
        self.store = store
        self.view = view
        self.term = term
        self.rewrite_id = f"t{term}-{uuid.uuid4().hex[:12]}"
        self.moves: dict[int, Move] = {}

    def move(self, segment: int, old: Iterable[str], new: Mapping[str, bytes]) -> None:
        """Segment ``segment``'s files ``old`` are to be replaced by ``new`` (final key ->
        bytes), staged now where no reader looks."""
        staged = {}
        for final, data in new.items():
            staged[final] = _staged_key(self.view, self.rewrite_id, final)
            self.store.put(staged[final], data)
        self.moves[segment] = Move(tuple(old), staged)

    def commit(self) -> None:
        """Make the rewrite visible with one fenced write, then finish it."""
        if not self.moves:
            return
        record = RewriteRecord(self.view, self.term, self.rewrite_id, COMMITTED, self.moves)
        try:
            _swap(self.store, self.view, self.term, lambda _current: record)
        except RewriteFenced:
            self._unstage()
            raise
        _finish(self.store, record, self.term)
        current, _ = read_rewrite_record(self.store, self.view)
        if current is not None and current.term > self.term:  # a successor finished it
            raise RewriteFenced(self.view, self.term, current.term)

    def _unstage(self) -> None:
        for move in self.moves.values():
            for staged in move.new.values():
                self.store.delete(staged)


def _still(store: ObjectStore, record: RewriteRecord, term: int) -> bool:
    """The record in force is still ``record``'s rewrite, committed, and no higher term wrote
    it (asked before each step of a finish: a finisher that lost it stops)."""
    current, _ = read_rewrite_record(store, record.view)
    return (
        current is not None
        and current.rewrite_id == record.rewrite_id
        and current.state == COMMITTED
        and current.term <= term
    )


def _finish(store: ObjectStore, record: RewriteRecord, term: int) -> None:
    """Publish a committed rewrite's new files under their final names, delete its old files,
    swap the record to finished, remove the staged copies. Idempotent: a successor finishes
    what a finisher that died or was fenced left."""
    for move in record.moves.values():
        for final, staged in move.new.items():
            if not _still(store, record, term):
                return
            try:
                store.put(final, store.get(staged))
            except FileNotFoundError:  # another finisher removed it: it finished the record
                return
        for old in move.old:
            if not _still(store, record, term):
                return
            store.delete(old)

    def finished(current: RewriteRecord | None) -> RewriteRecord | None:
        if current is None or current.rewrite_id != record.rewrite_id:
            return None
        if current.state != COMMITTED:
            return None
        return replace(current, state=FINISHED, term=max(term, current.term))

    done = _swap(store, record.view, term, finished)
    if done is not None:
        for move in record.moves.values():
            for staged in move.new.values():
                store.delete(staged)


def _listed(store: ObjectStore, view: str, segments: Iterable[int] | None) -> dict[int, list[str]]:
    """Segment -> its realtime files as listed (every segment of the view for None)."""
    found: dict[int, list[str]] = {}
    if segments is None:
        for key in store.list(view_prefix(view)):
            parts = key.split("/")  # segments/<view>/<segment>/realtime/<task>.parquet
            if len(parts) != 5 or parts[3] != "realtime":
                continue
            try:
                segment = parse_hour_label(parts[2])
            except ValueError:
                continue
            found.setdefault(segment, []).append(key)
        return found
    for segment in segments:
        keys = store.list(realtime_prefix(view, segment))
        if keys:
            found[segment] = keys
    return found


def _read_once(
    store: ObjectStore,
    view: str,
    segments: list[int] | None,
    record: RewriteRecord | None,
) -> dict[int, list[tuple[str, bytes]]]:
    """One listing and read, with a committed record applied; FileNotFoundError if a file
    vanished under it."""
    listed = _listed(store, view, segments)
    moves = record.moves if record is not None and record.state == COMMITTED else {}
    wanted = None if segments is None else set(segments)
    out: dict[int, list[tuple[str, bytes]]] = {}
    for segment in sorted(set(listed) | {s for s in moves if wanted is None or s in wanted}):
        keys = set(listed.get(segment, ()))
        move = moves.get(segment)
        blobs: dict[str, bytes] = {}
        if move is not None:
            keys -= set(move.old)
            for final, staged in move.new.items():
                keys.discard(final)
                try:
                    blobs[final] = store.get(final)
                except FileNotFoundError:
                    blobs[final] = store.get(staged)
        for key in keys:
            blobs[key] = store.get(key)
        if blobs:
            out[segment] = sorted(blobs.items())
    return out


def read_realtime(
    store: ObjectStore,
    view: str,
    segments: Iterable[int] | None = None,
    wait_s: float = READ_WAIT_S,
) -> dict[int, list[tuple[str, bytes]]]:
    """Segment -> its realtime files (key, bytes), sorted by key, for ``segments`` (None:
    every segment of the view): all from before any rewrite under way or all from after it.
    The one way Sluice reads realtime files; :class:`RewriteUnsettled` after ``wait_s``."""
    wanted = None if segments is None else sorted(set(segments))
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        before = store.get_versioned(rewrite_record_key(view))
        record = None if before is None else RewriteRecord.from_json(before[0])
        try:
            found: dict[int, list[tuple[str, bytes]]] | None = _read_once(
                store, view, wanted, record
            )
        except FileNotFoundError:
            found = None
        after = store.get_versioned(rewrite_record_key(view))
        if found is not None and (before and before[1]) == (after and after[1]):
            return found
        if time.monotonic() > deadline:
            raise RewriteUnsettled(
                f"{view}'s realtime files kept changing under a split or merge for over "
                f"{wait_s:g} s"
            )
        log.debug("%s: a rewrite changed the realtime files under a read; reading again", view)
        time.sleep(pause)  # a rewrite is a few writes: let it finish
        pause = min(pause * 2, 0.5)
