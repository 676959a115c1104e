"""A stream task: one partition of a topic (or one key bucket of it, a virtual task),
aggregated into every view on that topic.

Its output is a deterministic function of the partition's contents: windows and lateness
follow event time and the partition's watermark, so a replay after a crash rewrites
identical segments and splits and merges change no result. At-least-once delivery plus idempotent writes give exactly-once results.

A virtual task (bucket ``b`` of factor ``F``, :mod:`pipelines.stream.buckets`) sees every
record of its partition and decodes them all, its siblings' too, so its watermark before each
event is the partition's: what is late, or too far in the future, is decided as if the
partition were one task, wherever splits and merges fell. It keeps only its bucket's events,
dead letters and archive rows, and skips what a merge said was counted already (whose event
times still move the watermark). Its checkpoint, realtime segments and archive ranges carry
its bucket in their names.

Under a job model a task carries its owner's generation: it asks ``fence`` before every write
(raising :class:`TaskFenced` once a newer generation owns it), its checkpoints are written
under its generation, and it refuses to run on a checkpoint a newer generation wrote. A view
that fails raises :class:`ViewCrash` naming it, so the agent can restart the task and, after
repeated crashes, disable that view alone.

A task restarted after crashes is given a :class:`~pipelines.control.CrashPlan`: it processes
the offsets a crash covered one record at a time (so the next crash names one record) and
dead-letters a quarantined record as ``crashed_task`` instead of processing it; past them it
is back on the whole-batch path. A task never started after a crash does no such work.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pyarrow as pa

from pipelines.archive import ArchiveBuffer, counted_until, discard_uncommitted
from pipelines.config import SluiceSettings
from pipelines.control.crashes import CrashPlan
from pipelines.control.store import TaskStatus
from pipelines.events.avro import avro_decoder_for
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import (
    CRASHED_TASK,
    NO_WATERMARK,
    DeadLetter,
    DecodedBatch,
    RawRecord,
    RecordBatch,
)
from pipelines.exceptions import TaskFenced, ViewCrash
from pipelines.segments import ChangeLog, read_parquet, realtime_key, to_parquet
from pipelines.storage import ObjectStore
from pipelines.stream.buckets import backlog_share, key_hashes
from pipelines.stream.checkpoint import TaskCheckpoint, load_checkpoint, save_checkpoint
from pipelines.stream.dead_letters import DeadLetterSink
from pipelines.stream.task_id import TaskId
from pipelines.stream.type_errors import TypeErrors
from pipelines.stream.view_state import view_state
from pipelines.views.model import View
from pipelines.views.topics import declaration_for, default_declarations

__all__ = ["StreamTask"]

log = logging.getLogger(__name__)


Decoder = Callable[..., DecodedBatch]


def _declaration(topic: str, views: Sequence[View]) -> TopicDeclaration | None:
    """The declaration of the topic, which the task's views share (a task reads one topic);
    None when no view carries one (a few tests construct View objects directly; the loader
    always attaches one)."""
    declarations = {
        v.declaration.model_dump_json(): v.declaration
        for v in views
        if v.topic == topic and v.declaration is not None
    }
    if len(declarations) > 1:
        raise ValueError(f"views of topic {topic!r} carry different declarations")
    return next(iter(declarations.values()), None)


def _decoder(
    declaration: TopicDeclaration, partition: int, settings: SluiceSettings | None = None
) -> Decoder:
    """The decoder of the topic's declaration (an Avro topic's reads through the settings'
    schema registry)."""
    if declaration.encoding == "avro":
        registry = settings.schema_registry_conf() if settings is not None else None
        return partial(avro_decoder_for(declaration, registry), partition=partition)
    return partial(decoder_for(declaration), partition=partition)


class StreamTask:
    def __init__(
        self,
        topic: str,
        partition: int,
        views: Sequence[View],
        store: ObjectStore,
        dead_letters: DeadLetterSink,
        settings: SluiceSettings,
        generation: int | None = None,
        fence: Callable[[], bool] | None = None,
        bucket: int = 0,
        factor: int = 1,
    ) -> None:
        self.id = TaskId(topic, partition, bucket, factor)
        self.topic = topic
        self.bucket = bucket
        self.factor = factor
        self.skips: tuple[tuple[int, int, int], ...] = ()
        """(bucket, factor, until) left by a merge: those records below ``until`` are counted."""
        self.generation = generation
        """The owner's job-model generation; None (no job model) inherits the checkpoint's."""
        self.fence = fence
        """True while this owner still owns the task (the job model's fence); None = always."""
        self.partition = partition
        self.name = str(self.id)
        self.views = [v for v in views if v.topic == topic and not v.disabled]
        self.store = store
        self.sink = dead_letters
        self.settings = settings
        self.states = {v.name: view_state(v) for v in self.views}
        self.declaration = _declaration(topic, views) or declaration_for(
            topic, default_declarations()
        )
        """What the topic's events hold: the decoder's and the archive's columns."""
        self.decode = _decoder(self.declaration, partition, settings)
        self.watermark = NO_WATERMARK
        self.next_offset = 0
        self.consumed = 0
        self.dead_lettered: Counter[str] = Counter()
        self.type_errors = TypeErrors()
        """Per field and reason: messages dead-lettered for a value, values made null."""
        self.last_processed_ts: int | None = None
        self.checkpointed_offset: int | None = None
        self.state_bytes = 0
        """Window state in the last checkpoint written or restored (what a move carries)."""
        self.archive = ArchiveBuffer(
            topic, partition, 0, bucket, factor, declaration=self.declaration
        )
        self.changes = ChangeLog(store, topic, partition, bucket, factor)
        """The records of the segments its flushes rewrote, for the publisher."""
        self.seconds: Counter[str] = Counter()
        """Wall seconds spent hashing keys, decoding, aggregating and buffering the archive."""
        self.seen = 0
        """Records read from the partition and decoded (a virtual task's siblings' included)."""
        self.kept = 0
        """Records this task kept: its bucket's, not skipped."""
        self.replay_until = 0
        """Realtime files are not rewritten before ``next_offset`` reaches this: an earlier
        owner had flushed them that far (see :meth:`restore`)."""
        self.offset_resets = 0
        """Times the offset was out of the log's range and moved to the log start."""
        self.plan = CrashPlan()
        """Where earlier runs crashed (:meth:`guard`); empty, and free, on the normal path."""
        self.processing: tuple[int, int, int | None] = (0, 0, None)
        """``(first, end, timestamp)`` of the records being processed: where a crash was (the
        timestamp when they are one record)."""

    # --- lifecycle -----------------------------------------------------------------------

    def restore(self) -> int | None:
        """Load the last checkpoint; the offset to resume from, or None to start at the beginning."""
        checkpoint = load_checkpoint(self.store, self.topic, self.partition, *self.id.where)
        if checkpoint is None:
            self.generation = self.generation or 0
            self._check_fence()
            self.replay_until = discard_uncommitted(
                self.store, self.topic, self.partition, 0, *self.id.where
            )
            return None
        if self.generation is None:
            self.generation = checkpoint.generation
        elif checkpoint.generation > self.generation:
            raise TaskFenced(
                self.name,
                self.generation,
                f"the checkpoint was written by generation {checkpoint.generation}",
            )
        self.next_offset = checkpoint.next_offset
        self.checkpointed_offset = checkpoint.next_offset
        self.watermark = checkpoint.watermark
        self.consumed = checkpoint.consumed
        self.dead_lettered = Counter(checkpoint.dead_lettered)
        self.type_errors = TypeErrors.from_json(checkpoint.type_errors)
        for name, state in self.states.items():
            saved = checkpoint.views.get(name)
            if saved is None or saved.get("fingerprint") != state.view.fingerprint:
                log.warning(
                    "%s: view %s is new or changed since the checkpoint; it starts at offset %d",
                    self.name,
                    name,
                    checkpoint.next_offset,
                )
                continue
            pending = checkpoint.pending.get(name)
            try:
                state.load(
                    read_parquet(checkpoint.states[name]),
                    None if pending is None else read_parquet(pending),
                )
            except Exception as exc:  # one view's state is unreadable: that view crashed
                raise ViewCrash(self.name, name, exc) from exc
            state.processed = saved["processed"]
            state.late = saved["late"]
        self.state_bytes = checkpoint.state_bytes
        self.skips = checkpoint.skips
        self.offset_resets = checkpoint.offset_resets
        self.archive = ArchiveBuffer(
            self.topic,
            self.partition,
            checkpoint.next_offset,
            *self.id.where,
            declaration=self.declaration,
        )
        self._check_fence()
        flushed = discard_uncommitted(
            self.store,
            self.topic,
            self.partition,
            checkpoint.next_offset,
            *self.id.where,
            counted_until(*self.id.where, checkpoint.skips),
        )
        self.replay_until = max(checkpoint.replay_until, flushed)
        if self.replay_until > self.next_offset:
            # The files are ahead of this state: hold them until the replay catches up, then
            # rewrite every segment held (an earlier flush may have reached the files only in
            # part, and a checkpoint taken while holding does not say which were changed).
            for state in self.states.values():
                state.dirty.update(state.buckets)
            log.info(
                "%s: realtime files hold offsets up to %d; not rewritten before the replay "
                "from %d gets there",
                self.name,
                self.replay_until,
                self.next_offset,
            )
        log.info("%s: restored checkpoint at offset %d", self.name, checkpoint.next_offset)
        return checkpoint.next_offset

    def reset(self) -> None:
        """Forget restored state (the log it described is gone)."""
        self.states = {v.name: view_state(v) for v in self.views}
        self.watermark = NO_WATERMARK
        self.consumed = 0
        self.dead_lettered = Counter()
        self.type_errors = TypeErrors()
        self.checkpointed_offset = None
        self.state_bytes = 0
        self.skips = ()
        self.replay_until = 0
        discard_uncommitted(self.store, self.topic, self.partition, 0, *self.id.where)

    def resume_in_range(self, start: int, end: int) -> None:
        """The restored offset is outside the log ``[start, end]``: start over at ``start``,
        loudly. Past the end, the log the state describes is gone (a recreated topic, a broker
        that lost data): the state goes too. Before the start, retention deleted records the
        task never read: the state stays, those records are lost and the error says how many."""
        at = self.next_offset
        self.offset_resets += 1
        if at > end:
            log.error(
                "%s: offset out of range: the checkpoint is at %d, past the log end %d (a "
                "recreated topic or a broker that lost data); its state is dropped and the task "
                "starts over at the log start %d",
                self.name,
                at,
                end,
                start,
            )
            self.reset()
        else:
            log.error(
                "%s: offset out of range: the checkpoint is at %d, before the log start %d: "
                "%d records were deleted by retention before they were read",
                self.name,
                at,
                start,
                start - at,
            )
        self.start_at(start)

    def skipped_to(self, first: int, start: int) -> None:
        """The reader jumped from ``next_offset`` to ``first``, and the log now starts at
        ``start`` past ``next_offset``: the client reset an out-of-range fetch to the log start
        (``auto.offset.reset``); count it and say what was lost."""
        self.offset_resets += 1
        log.error(
            "%s: offset out of range while reading: expected %d, the log starts at %d; "
            "resumed at %d, %d records were deleted by retention before they were read",
            self.name,
            self.next_offset,
            start,
            first,
            first - self.next_offset,
        )

    def start_at(self, offset: int) -> None:
        """Where consumption begins when there is no checkpoint (the log start)."""
        self.next_offset = offset
        self.archive = ArchiveBuffer(
            self.topic, self.partition, offset, *self.id.where, declaration=self.declaration
        )

    def guard(self, plan: CrashPlan) -> None:
        """Process the offsets earlier crashes covered one at a time, skipping quarantined
        records (dead-lettered as ``crashed_task``), until past all of them."""
        self.plan = plan
        if plan:
            log.warning(
                "%s: restarted after crashes: offsets %s one record at a time, %d quarantined",
                self.name,
                ", ".join(f"[{a}, {b})" for a, b in plan.suspects),
                len(plan.quarantined),
            )

    # --- the hot path --------------------------------------------------------------------

    @property
    def filters(self) -> bool:
        """True if this task keeps only some of its partition's records (hashes needed)."""
        return self.factor > 1 or bool(self.skips)

    def process(
        self, records: RecordBatch | Sequence[RawRecord], hashes: np.ndarray | None = None
    ) -> None:
        """Fold a batch of the partition in; ``hashes`` are its records' bucket hashes if the
        caller computed them for all the partition's virtual tasks at once."""
        if not records:
            return
        if not isinstance(records, RecordBatch):
            records = RecordBatch.of(records)
        end = records.offsets[-1] + 1
        if end <= self.next_offset:
            return  # a sibling on this reader is behind: all of it was read before
        mine = None
        if self.filters or records.offsets[0] < self.next_offset:
            records, mine = self._own(records, hashes)
        else:
            self.seen += len(records)
            self.kept += len(records)
        self.processing = (records.offsets[0], end, None)
        if self.plan:
            self._process_guarded(records, mine, end)
            return
        self._fold(records, mine, end)

    def _fold(self, records: RecordBatch, mine: np.ndarray | None, end: int) -> None:
        """Decode ``records`` and fold the events of those ``mine`` marks (None: all) into
        every view; ``end`` is where the task is then. Every record is decoded, so the
        watermark follows all of them."""
        started = time.perf_counter()
        batch = self.decode(
            records,
            self.watermark,
            max_message_bytes=self.settings.max_message_bytes,
            max_future_ms=int(self.settings.max_future_s * 1000),
        )
        if mine is not None:
            batch = batch.only(np.asarray(records.offsets, dtype=np.int64)[mine])
        batch.next_offset = end
        for letter in batch.dead_letters:
            self.sink.send(self.topic, self.partition, letter)
            self.dead_lettered[letter.reason] += 1
        self.type_errors.add(batch)
        decoded = time.perf_counter()
        for name, state in self.states.items():
            try:
                state.update(batch)
            except Exception as exc:
                raise ViewCrash(self.name, name, exc) from exc
        aggregated = time.perf_counter()
        self.archive.add(batch)
        self.seconds["decode"] += decoded - started
        self.seconds["aggregate"] += aggregated - decoded
        self.seconds["archive"] += time.perf_counter() - aggregated
        self.watermark = batch.watermark
        self.consumed += batch.consumed
        self.next_offset = batch.next_offset
        self.last_processed_ts = records.timestamps[-1]

    def _process_guarded(self, records: RecordBatch, mine: np.ndarray | None, end: int) -> None:
        """:meth:`process` under a crash plan: suspect offsets one record at a time,
        quarantined ones dead-lettered, the records between them as one batch. A quarantined
        record of a sibling bucket is not this task's to dead-letter: it is only passed over."""
        plan = self.plan
        if records.offsets[0] >= max(
            [e for _, e in plan.suspects] + [o + 1 for o in plan.quarantined]
        ):
            self.plan = CrashPlan()  # past every crash: back on the whole-batch path
            log.info("%s: past the offsets it crashed on", self.name)
            self._fold(records, mine, end)
            return
        start = 0
        for i, offset in enumerate(records.offsets):
            crash = plan.quarantined.get(offset)
            quarantined = crash is not None and crash.record_ts == records.timestamps[i]
            if not quarantined and not plan.suspect(offset):
                continue
            if start < i:
                self._fold_slice(records, mine, start, i, offset)
            if not quarantined:
                self._fold_slice(records, mine, i, i + 1, offset + 1)
            elif mine is None or mine[i]:
                self._quarantine(records, i, crash.detail())
            start = i + 1
        if start < len(records):
            self._fold_slice(records, mine, start, len(records), end)
        self.next_offset = end
        self.archive.advance(end)

    def _fold_slice(
        self, records: RecordBatch, mine: np.ndarray | None, lo: int, hi: int, end: int
    ) -> None:
        part = records.slice(lo, hi)
        self.processing = (part.offsets[0], end, part.timestamps[0] if hi - lo == 1 else None)
        self._fold(part, None if mine is None else mine[lo:hi], end)

    def _quarantine(self, records: RecordBatch, i: int, detail: str) -> None:
        """Dead-letter record ``i`` as ``crashed_task`` without processing it."""
        offset = records.offsets[i]
        letter = DeadLetter(offset, records.timestamps[i], CRASHED_TASK, detail, records.values[i])
        log.warning("%s: offset %d quarantined: %s", self.name, offset, detail)
        self.sink.send(self.topic, self.partition, letter)
        self.dead_lettered[CRASHED_TASK] += 1
        self.consumed += 1
        none = np.empty(0, dtype=np.int64)
        self.archive.add(
            DecodedBatch(none, none, {}, none, [letter], self.watermark, 1, offset + 1)
        )
        self.next_offset = offset + 1
        self.last_processed_ts = records.timestamps[i]

    def _own(
        self, records: RecordBatch, hashes: np.ndarray | None
    ) -> tuple[RecordBatch, np.ndarray | None]:
        """The records of the batch not read yet (from ``next_offset``: those before it are in
        the watermark already), and which of them are this task's to count (None: all)."""
        started = time.perf_counter()
        first = bisect_left(records.offsets, self.next_offset)
        if first:
            records = records.slice(first, len(records))
            hashes = None if hashes is None else hashes[first:]
        self.seen += len(records)
        mine = None
        if self.filters:
            offsets = np.asarray(records.offsets, dtype=np.int64)
            if hashes is None:
                hashes = key_hashes(records.keys, records.offsets)
            mine = np.ones(len(records), dtype=bool)
            if self.factor > 1:
                mine &= hashes % np.uint64(self.factor) == np.uint64(self.bucket)
            for bucket, factor, until in self.skips:
                mine &= ~((hashes % np.uint64(factor) == np.uint64(bucket)) & (offsets < until))
            if self.skips and offsets[-1] + 1 >= max(until for *_, until in self.skips):
                self.skips = ()  # every record the merged tasks had counted is behind us
            if mine.all():
                mine = None
        self.kept += len(records) if mine is None else int(mine.sum())
        self.seconds["hash"] += time.perf_counter() - started
        return records, mine

    # --- durability ----------------------------------------------------------------------

    def flush(self, checkpoint: bool = False) -> None:
        """Make everything consumed so far durable, except the offset itself (for a
        ``checkpoint``, whose state is written next).

        1. Archive the events and dead letters consumed since the last flush.
        2. Fold settled events into session views' sessions (closing those due), then rewrite
           the realtime segment of every segment touched since the last flush (a session
           view's from memory plus the closed sessions its file holds; those then leave
           memory). A task replaying what an earlier owner had already flushed
           (:attr:`replay_until`) leaves the files as they are until it gets past that: they
           are ahead of its state, and served results must not go back. Each view's rewritten
           segments are then recorded in the change log the publisher consumes
           (:mod:`pipelines.segments.changes`).
        3. Wait until the dead-letter topic has every dead letter sent so far.

        Under a job model the fence is asked first: a fenced owner writes nothing.
        """
        self._check_fence()
        self.archive.write(self.store)  # 1
        holding = self.next_offset < self.replay_until
        for state in self.states.values():  # 2
            state.settle(self.watermark)
            if holding:
                continue
            rewritten = sorted(state.dirty)
            for segment in rewritten:
                key = realtime_key(
                    state.view.name, segment, self.topic, self.partition, *self.id.where
                )
                table = state.segment_table(segment, lambda key=key: self._current(key))
                self.store.put(key, to_parquet(table))
            if rewritten:  # after the files: a publisher that sees the record sees them
                self.changes.record(state.view.name, rewritten, self.generation or 0)
            state.flushed(checkpoint)
        self.sink.flush()  # 3

    def _current(self, key: str) -> pa.Table | None:
        """A realtime segment file as written by the last flush, or None."""
        try:
            return read_parquet(self.store.get(key))
        except FileNotFoundError:
            return None

    def checkpoint(self, commit_offset: Callable[[int], None] | None = None) -> None:
        """Persist state and offset so that a restart resumes exactly here.

        1. Flush: archive, segments and dead letters become durable.
        2. Evict segments no in-time event can reach; their final state is in step 1's files.
        3. Write the checkpoint (window state, next offset, watermark, counters) atomically.
        4. Commit the next offset to the Kafka consumer group, so external lag tools agree.
        """
        started = time.monotonic()
        self.flush(checkpoint=True)  # 1
        for state in self.states.values():  # 2 (not a segment still held unwritten)
            state.evict([s for s in state.closed_segments(self.watermark) if s not in state.dirty])
        checkpoint = TaskCheckpoint(  # 3
            topic=self.topic,
            partition=self.partition,
            next_offset=self.next_offset,
            watermark=self.watermark,
            consumed=self.consumed,
            dead_lettered=dict(self.dead_lettered),
            type_errors=self.type_errors.as_json(),
            views={
                name: {
                    "fingerprint": s.view.fingerprint,
                    "processed": s.processed,
                    "late": s.late,
                }
                for name, s in self.states.items()
            },
            states={name: to_parquet(s.all_table()) for name, s in self.states.items()},
            pending={
                name: to_parquet(table)
                for name, s in self.states.items()
                if (table := s.pending_table()) is not None
            },
            generation=self.generation or 0,
            bucket=self.bucket,
            factor=self.factor,
            skips=self.skips,
            replay_until=self.replay_until if self.replay_until > self.next_offset else 0,
            offset_resets=self.offset_resets,
        )
        save_checkpoint(self.store, checkpoint)
        self.checkpointed_offset = self.next_offset
        self.state_bytes = checkpoint.state_bytes
        if commit_offset is not None:  # 4
            commit_offset(self.next_offset)
        log.debug(
            "%s: checkpoint at offset %d in %.3fs",
            self.name,
            self.next_offset,
            time.monotonic() - started,
        )

    def _check_fence(self) -> None:
        if self.fence is not None and not self.fence():
            raise TaskFenced(self.name, self.generation or 0, "a newer generation owns it")

    # --- reporting -----------------------------------------------------------------------

    @property
    def total_dead_lettered(self) -> int:
        return sum(self.dead_lettered.values())

    def view_counters(self) -> dict[str, dict[str, int]]:
        """Per view: consumed = processed + dead_lettered + dropped_late, always."""
        return {
            name: {
                "consumed": self.consumed,
                "processed": s.processed,
                "dead_lettered": self.total_dead_lettered,
                "dropped_late": s.late,
            }
            for name, s in self.states.items()
        }

    def status(
        self,
        worker_id: str,
        end_offset: int,
        *,
        busy_s: float = 0.0,
        utilization: float = 0.0,
        rate_in: float = 0.0,
        state: str = "running",
    ) -> TaskStatus:
        """What the control store is told about this task (by its worker, or by a test that
        ran it with :func:`pipelines.testing.run_stream`); the log end comes from the reader."""
        counters = self.view_counters()
        return TaskStatus(
            task=self.name,
            topic=self.topic,
            partition=self.partition,
            worker_id=worker_id,
            pid=os.getpid(),
            consumed=self.consumed,
            processed=self.consumed - self.total_dead_lettered,
            dead_lettered=self.total_dead_lettered,
            dropped_late=max((c["dropped_late"] for c in counters.values()), default=0),
            busy_s=busy_s,
            utilization=utilization,
            rate_in=rate_in,
            next_offset=self.next_offset,
            end_offset=end_offset,
            backlog=backlog_share(end_offset - self.next_offset, self.factor),
            last_processed_ts=self.last_processed_ts,
            watermark=self.watermark if self.watermark > 0 else None,
            checkpointed_offset=self.checkpointed_offset,
            state=state,
            views={
                "counters": counters,
                "dead_letter_reasons": dict(self.dead_lettered),
                "type_errors": self.type_errors.as_json(),
                "quarantined": self.dead_lettered[CRASHED_TASK],
                "offset_resets": self.offset_resets,
                "isolating": [list(r) for r in self.plan.suspects],
                "bucket": {
                    "bucket": self.bucket,
                    "factor": self.factor,
                    "seen": self.seen,
                    "kept": self.kept,
                    "hash_s": round(self.seconds["hash"], 4),
                },
            },
            generation=self.generation or 0,
            state_bytes=self.state_bytes,
        )
