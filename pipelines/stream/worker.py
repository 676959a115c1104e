"""A stream worker: one process running the tasks the job model gave it.

It consumes its partitions by manual assignment (no group rebalancing: the control plane
decides who runs what) through the clients it is given (:mod:`pipelines.stream.clients`: a
broker's, or the in-memory ones of :mod:`pipelines.kafka.memory`), feeds each task its records
(the virtual tasks of one partition on this worker share one read, from the lowest of their
offsets, and its key hashes), flushes and checkpoints on schedule, and reports per-task
metrics to the control store. SIGTERM or SIGINT stop it gracefully,
with a final checkpoint; SIGKILL loses nothing either, since it resumes from the last one.

An agent drives a worker through its job model: :meth:`StreamWorker.start_task` and
:meth:`StreamWorker.stop_task` are safe to call from another thread and take effect between
polls; what became of each task (started, stopped, fenced, crashed) goes back through
``on_event``. Any exception while a task processes a batch (a view's, or any other) crashes
that task alone: it is dropped without writing and reported with the offsets it was processing
and the traceback's last line, so its next start can take them one record at a time and
quarantine the record that crashes it again (:mod:`pipelines.control.crashes`); the worker and
its other tasks go on. Without an agent the worker runs the tasks it was built with, and a
crash stops the process (nothing would restart the task).

Utilisation (busy time over wall time) counts decoding, processing, flushes and checkpoints,
not waiting for the broker, so rate / utilisation estimates what the worker could carry. With
``SLUICE_WORKER_MAX_RATE`` set, every batch takes at least ``records / rate`` seconds: the
worker pauses for the rest, in short slices so reports, checkpoints and signals stay prompt,
and a record costs at least ``1 / rate`` of busy time, so autoscalers see the cap as capacity.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kafka import TopicPartition
from kafka.errors import KafkaError

from pipelines.config import SluiceSettings
from pipelines.control import ControlStore, TaskCrash, TaskStatus, crash_plan
from pipelines.exceptions import (
    BrokerUnavailable,
    SchemaRegistryUnreachable,
    StorageError,
    TaskFenced,
    ViewCrash,
)
from pipelines.stopping import StopDeadline, on_stop_signals
from pipelines.storage import ObjectStore
from pipelines.stream.buckets import key_hashes
from pipelines.stream.clients import WorkerClients
from pipelines.stream.dead_letters import KafkaDeadLetterSink
from pipelines.stream.task import StreamTask
from pipelines.stream.task_id import TaskId
from pipelines.views.model import View

__all__ = ["StreamWorker", "TaskEvent", "TaskId"]

log = logging.getLogger(__name__)

TIME_PARTS = ("read", "hash", "decode", "aggregate", "archive", "flush", "checkpoint")
"""Where a worker's time goes, as status shows it (the rest is waiting)."""

THROTTLE_SLICE_S = 0.2
"""A rate-capped worker polls at most ``rate * THROTTLE_SLICE_S`` records at a time, so one
pause is about this long."""


NOT_THE_RECORDS = (KafkaError, BrokerUnavailable, StorageError, OSError, SchemaRegistryUnreachable)
"""Failures of what a task talks to (the dead-letter producer, storage, the schema registry),
not of what it read: a crash by one of these names no offsets, so no record is ever
quarantined for it."""


@dataclass(frozen=True)
class TaskEvent:
    """What became of a task the worker was asked to run or stop."""

    kind: str
    """``started`` (restored, consuming), ``stopped`` (at a final checkpoint), ``fenced`` (a
    newer generation owns it; dropped without writing) or ``crashed`` (a view failed; dropped
    without writing, it resumes from its last checkpoint when started again)."""
    task: TaskId
    generation: int
    detail: str = ""
    view: str | None = None
    """The view that crashed."""
    first_offset: int | None = None
    """A crash: the offsets ``[first_offset, end_offset)`` being processed (equal if it
    crashed restoring)."""
    end_offset: int | None = None
    record_ts: int | None = None
    """A crash on one record: its Kafka timestamp."""
    error: str = ""
    """A crash: the traceback's last line."""


@dataclass(frozen=True)
class _Start:
    task: TaskId
    generation: int | None
    views: tuple[View, ...]
    fence: Callable[[], bool] | None
    crashes: tuple[TaskCrash, ...] = ()


@dataclass(frozen=True)
class _Stop:
    task: TaskId
    checkpoint: bool
    reason: str


GC_YOUNG_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation (Python's default: 700)."""


def tune_collector() -> None:
    """Collect cyclic garbage less often in a worker: its hot path allocates many small
    objects that die young (events, session pieces) and makes no cycles, and each collection
    also walks every object the worker holds (open windows and sessions). What is alive at
    start (modules, settings, views) is frozen out of the collector's walks."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), middle, old)


class StreamWorker:
    def __init__(
        self,
        worker_id: str,
        tasks: Sequence[TaskId],
        views: Sequence[View],
        settings: SluiceSettings,
        clients: WorkerClients,
        store: ObjectStore,
        control: ControlStore | None = None,
        *,
        topic: str | None = None,
        on_event: Callable[[TaskEvent], None] | None = None,
    ) -> None:
        topics = sorted({t.topic for t in tasks} | ({topic} if topic else set()))
        if not topics:
            raise ValueError(f"worker {worker_id} was given no tasks and no topic")
        if len(topics) != 1:
            raise ValueError(f"a worker serves one topic's tasks, got {topics}")
        self.topic = topics[0]
        self.worker_id = worker_id
        self.on_event = on_event
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.settings = settings
        self.store = store
        self.control = control
        self.stop_event = threading.Event()
        self.reader = clients.reader
        """What the worker reads with, given by whoever built it (a broker's client, or the
        in-memory reader of :mod:`pipelines.kafka.memory`); closed when the worker stops."""
        self.dead_letter_writer = clients.dead_letters
        self.sink = KafkaDeadLetterSink(
            self.dead_letter_writer, settings.dead_letter_topic, clients.timeout_s
        )
        self.tasks: dict[TaskId, StreamTask] = {}
        for t in tasks:
            self.commands.put(_Start(t, None, tuple(views), None))
        self.busy_s = 0.0
        self.seconds: Counter[str] = Counter()
        """Wall seconds spent reading (polls that returned records), flushing, checkpointing."""
        self._shares_at: dict[str, float] = {}
        self.started_at: float | None = None
        self.last_progress_at: float | None = None
        """Monotonic time of the last batch processed; benchmarks measure up to it."""
        self._ends: dict[TopicPartition, int] = {}

    def install_signal_handlers(self, deadline: StopDeadline | None = None) -> None:
        """SIGTERM and SIGINT stop the worker after a final checkpoint; if that takes longer
        than ``deadline`` (SLUICE_STOP_TIMEOUT_S), the process exits anyway."""
        what = f"worker {self.worker_id}"
        on_stop_signals(
            self.stop_event, deadline or StopDeadline(self.settings.stop_timeout_s, what)
        )

    # --- the job model's commands (any thread) -------------------------------------------

    def start_task(
        self,
        task: TaskId,
        generation: int | None,
        views: Sequence[View],
        fence: Callable[[], bool] | None = None,
        crashes: Sequence[TaskCrash] = (),
    ) -> None:
        """Run ``task`` from its checkpoint as ``generation``, between the next two polls;
        ``crashes`` are its earlier crashes (it isolates and quarantines what they cover)."""
        self.commands.put(_Start(task, generation, tuple(views), fence, tuple(crashes)))

    def stop_task(self, task: TaskId, checkpoint: bool, reason: str) -> None:
        """Stop ``task``: at a final checkpoint (a hand-off), or dropping what it has not
        checkpointed (its owner is fenced; the next owner replays from the checkpoint)."""
        self.commands.put(_Stop(task, checkpoint, reason))

    def running(self) -> dict[TaskId, int]:
        """Task -> generation of what runs now (a snapshot, safe from any thread)."""
        return {task_id: t.generation or 0 for task_id, t in list(self.tasks.items())}

    # --- the worker thread ---------------------------------------------------------------

    def _apply_commands(self) -> bool:
        """Carry out queued starts and stops; True if the assignment changed."""
        changed = False
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return changed
            if isinstance(command, _Start):
                changed |= self._start(command)
            else:
                changed |= self._stop(command)

    def _emit(
        self,
        kind: str,
        task: StreamTask,
        detail: str = "",
        view: str | None = None,
        **crash: int | str | None,
    ) -> None:
        log.log(
            logging.INFO if kind in ("started", "stopped") else logging.WARNING,
            "worker %s: %s %s (generation %s) %s",
            self.worker_id,
            kind,
            task.name,
            task.generation,
            detail,
        )
        if self.on_event is not None:
            event = TaskEvent(kind, task.id, task.generation or 0, detail, view, **crash)
            self.on_event(event)

    def _start(self, command: _Start) -> bool:
        task_id = command.task
        tp = TopicPartition(task_id.topic, task_id.partition)
        if task_id.topic != self.topic:
            raise ValueError(f"worker {self.worker_id} serves {self.topic}, not {task_id}")
        if task_id in self.tasks:
            if self.tasks[task_id].generation == command.generation:
                return False
            del self.tasks[task_id]  # a new generation of a task we ran: restore it afresh
        task = StreamTask(
            tp.topic,
            tp.partition,
            command.views,
            self.store,
            self.sink,
            self.settings,
            command.generation,
            command.fence,
            task_id.bucket,
            task_id.factor,
        )
        try:
            offset = task.restore()
            start = self.reader.beginning_offsets([tp]).get(tp, 0)
            end = self.reader.end_offsets([tp]).get(tp, 0)
            if offset is not None and offset > end:  # ListOffsets may under-report: ask a fetch
                end = max(end, self.reader.fetched_end(tp, offset) or 0)
            if offset is None:
                task.start_at(start)
            elif not start <= offset <= end:  # checked here, not left to auto.offset.reset
                task.resume_in_range(start, end)
            if command.crashes:
                task.guard(crash_plan(command.crashes))
        except TaskFenced as exc:
            self._lose(task, exc)
            return False
        except Exception as exc:  # it cannot start (a view's state is unreadable...)
            task.processing = (task.next_offset, task.next_offset, None)
            self._crash(task, exc)
            return False
        self.tasks[task_id] = task
        self._emit("started", task, f"at offset {task.next_offset}")
        return True

    def _stop(self, command: _Stop) -> bool:
        task = self.tasks.pop(command.task, None)
        if task is None:
            return False
        if not command.checkpoint:
            self._emit("fenced", task, command.reason)
            return True
        try:
            task.checkpoint(self._commit(task))
        except TaskFenced as exc:
            self._emit("fenced", task, str(exc))
            return True
        self._report_final([task])
        self._emit("stopped", task, f"at offset {task.next_offset}: {command.reason}")
        return True

    def _lose(self, task: StreamTask, exc: TaskFenced) -> None:
        """``task`` is fenced: drop it without writing (its new owner resumes it)."""
        if self.on_event is None:
            raise exc  # no agent to restart it: the process fails, its supervisor sees it
        self.tasks.pop(task.id, None)
        self._emit("fenced", task, str(exc))

    def _crash(self, task: StreamTask, exc: Exception) -> None:
        """``task`` raised: drop it without writing (it resumes from its checkpoint) and say
        where, so its next start isolates those offsets; the worker goes on.

        The task stays in :meth:`running` until ``on_event`` has returned: an agent records
        the crash there, and its control thread starts a task that is neither running nor
        asked for, so a task dropped first could be started again, on a crash log without
        this crash, and crash on the whole batch again (one more crash toward disabling the
        view, and no record isolated). Nothing else sees it meanwhile: only this thread
        processes, flushes or checkpoints tasks."""
        if self.on_event is None:
            self.tasks.pop(task.id, None)
            raise exc  # no agent to restart it: the process fails, its supervisor sees it
        try:
            view = exc.view if isinstance(exc, ViewCrash) else None
            cause = exc.cause if isinstance(exc, ViewCrash) else exc
            error = traceback.format_exception_only(cause)[-1].strip()[:1000]
            first, end, stamp = task.processing
            if isinstance(cause, NOT_THE_RECORDS):
                first, end, stamp = task.next_offset, task.next_offset, None
            detail = str(exc) if view else f"{task.name} crashed: {error}"
            self._emit(
                "crashed",
                task,
                detail,
                view,
                first_offset=first,
                end_offset=end,
                record_ts=stamp,
                error=error,
            )
        finally:  # its state is not to be checkpointed, even at shutdown
            self.tasks.pop(task.id, None)

    def _check_reset(self, tp: TopicPartition, tasks: list[StreamTask], first: int) -> None:
        """A read that starts past where the tasks were is a gap (compaction, transaction
        markers) or the client's ``auto.offset.reset`` after an out-of-range fetch: the log
        start tells which, and a reset is an error that status counts."""
        behind = [t for t in tasks if t.next_offset < first]
        if not behind:
            return
        try:
            start = self.reader.beginning_offsets([tp]).get(tp, 0)
        except BrokerUnavailable:
            return
        for task in behind:
            if task.next_offset < start:
                task.skipped_to(first, start)

    def _reassign(self) -> None:
        """Point the reader at the current tasks, each at its next offset."""
        positions: dict[TopicPartition, int] = {}
        for task in self.tasks.values():
            tp = TopicPartition(task.topic, task.partition)
            positions[tp] = min(positions.get(tp, task.next_offset), task.next_offset)
        self.reader.assign(positions)

    def _partitions(self) -> dict[TopicPartition, list[StreamTask]]:
        """The tasks of each partition read (virtual tasks of one partition share its reads)."""
        out: dict[TopicPartition, list[StreamTask]] = {}
        for task in self.tasks.values():
            out.setdefault(TopicPartition(task.topic, task.partition), []).append(task)
        return out

    def _commit(self, task: StreamTask):
        """Commit a checkpointed offset to the consumer group: the whole partition's task, or
        bucket 0 of a split one (the group has one offset per partition)."""
        if task.bucket != 0:
            return None
        tp = TopicPartition(task.topic, task.partition)

        def commit(offset: int) -> None:
            try:
                self.reader.commit(tp, offset)
            except KafkaError as exc:  # the checkpoint is the truth; this is a courtesy copy
                log.warning("commit of %s@%d to the consumer group failed: %s", tp, offset, exc)

        return commit

    def run(self, max_idle_s: float | None = None) -> None:
        """Consume until stopped (or, for tests and benchmarks, idle for ``max_idle_s``)."""
        tune_collector()
        self._apply_commands()
        self._reassign()
        settings = self.settings
        now = self.started_at = time.monotonic()
        next_flush = now + settings.flush_interval_s
        next_checkpoint = now + settings.checkpoint_interval_s
        next_status = now
        last_status = now
        last_consumed: dict[TopicPartition, int] = {}
        busy_at_status = 0.0
        idle_since: float | None = None  # start of the current run of empty polls
        max_records = settings.poll_max_records
        if settings.worker_max_rate is not None:
            max_records = max(1, min(max_records, int(settings.worker_max_rate * THROTTLE_SLICE_S)))
        try:
            while not self.stop_event.is_set():
                if self._apply_commands():
                    self._reassign()
                poll_started, poll_cpu = time.monotonic(), time.process_time()
                if self.tasks:
                    polled = self.reader.poll(0.2, max_records)
                else:  # nothing to run until the job model gives us something
                    self.stop_event.wait(0.2)
                    polled = {}
                if polled:
                    # Waiting in poll for the broker is idle; decoding what it sent is work
                    # (the CPU time of the poll), and so is processing.
                    polled_at = time.monotonic()
                    self.seconds["read"] += polled_at - poll_started
                    work_s = min(polled_at - poll_started, time.process_time() - poll_cpu)
                    lost = False
                    readers = self._partitions()
                    for tp, records in polled.items():
                        tasks = readers.get(tp, [])  # none: stopped since the fetch
                        if tasks:
                            self._check_reset(tp, tasks, records.offsets[0])
                        hashes = None
                        if len(tasks) > 1 and any(t.filters for t in tasks):  # hash once
                            hashed = time.perf_counter()
                            hashes = key_hashes(records.keys, records.offsets)
                            self.seconds["hash"] += time.perf_counter() - hashed
                        for task in tasks:
                            try:
                                task.process(records, hashes)
                            except TaskFenced as exc:
                                self._lose(task, exc)
                                lost = True
                            except Exception as exc:  # whatever the input did: this task alone
                                self._crash(task, exc)
                                lost = True
                    if lost:
                        self._reassign()
                    idle_since = None
                    self.last_progress_at = time.monotonic()
                    work_s += self.last_progress_at - polled_at
                    self.busy_s += self._throttle(
                        sum(map(len, polled.values())),
                        work_s,
                        self.last_progress_at - poll_started,
                    )
                elif idle_since is None:
                    idle_since = poll_started
                now = time.monotonic()
                if now >= next_checkpoint:
                    started = now
                    self._durable(lambda task: task.checkpoint(self._commit(task)))
                    now = time.monotonic()
                    self.busy_s += now - started
                    self.seconds["checkpoint"] += now - started
                    next_checkpoint = now + settings.checkpoint_interval_s
                    next_flush = now + settings.flush_interval_s
                elif now >= next_flush:
                    started = now
                    self._durable(lambda task: task.flush())
                    now = time.monotonic()
                    self.busy_s += now - started
                    self.seconds["flush"] += now - started
                    next_flush = now + settings.flush_interval_s
                if now >= next_status:
                    elapsed = max(now - last_status, 1e-6)
                    util = min(1.0, (self.busy_s - busy_at_status) / elapsed)
                    self._report(util, elapsed, last_consumed)
                    last_consumed = {k: t.consumed for k, t in self.tasks.items()}
                    busy_at_status, last_status = self.busy_s, now
                    next_status = now + settings.status_interval_s
                    if idle_since is not None and self._read_to_input_end():
                        next_checkpoint = now  # the input's last hours wait for it
                if (
                    max_idle_s is not None
                    and idle_since is not None
                    and now - idle_since > max_idle_s
                ):
                    break
        finally:
            self._shutdown()

    def _durable(self, write: Callable[[StreamTask], None]) -> None:
        """Flush or checkpoint every task; a fenced one is dropped, the others go on."""
        lost = False
        for task in list(self.tasks.values()):
            try:
                write(task)
            except TaskFenced as exc:
                self._lose(task, exc)
                lost = True
        if lost:
            self._reassign()

    def _throttle(self, records: int, work_s: float, wall_s: float) -> float:
        """Hold a batch of ``records`` to ``records / max_rate`` seconds; its busy time, in s.

        Under a cap every record costs at least ``1 / max_rate`` of busy time, whether the
        worker computed or paused: utilisation is then the share of the capped capacity in use
        and rate / utilisation (the true rate autoscalers size from) is the cap, not what the
        worker could do without it.
        """
        rate = self.settings.worker_max_rate
        if rate is None:
            return work_s
        due = records / rate
        if due > wall_s:
            self.stop_event.wait(due - wall_s)  # a stop signal ends the pause at once
        return max(work_s, due)

    def _report(
        self, util: float, elapsed: float, last_consumed: dict, state: str = "running"
    ) -> None:
        if state == "stopped":  # the last report: what the broker said last (it may be gone)
            ends = self._ends
        else:
            ends = self.reader.end_offsets(list(self._partitions())) if self.tasks else {}
            self._ends = ends
        if self.control is None:
            return
        statuses = [
            self._status(task, ends, util, elapsed, last_consumed, state)
            for task in self.tasks.values()
        ]
        try:
            self.control.report_tasks(statuses)
            self.control.report_worker(
                self.worker_id,
                os.getpid(),
                [t.name for t in self.tasks.values()],
                state,
                self._time_shares(elapsed),
            )
        except Exception as exc:  # reporting must never stop processing
            log.warning("worker %s: status report failed: %s", self.worker_id, exc)

    def _read_to_input_end(self) -> bool:
        """Whether a task has read its topic's bounded input to the end (the offsets `sluice
        generate` records when its replay is over) and not yet checkpointed through it: the
        archive sensor closes the input's last hours once every task has, so the checkpoint
        is due now rather than at the next interval. Asked only while the worker idles."""
        if self.control is None:
            return False
        try:
            for topic in {task.topic for task in self.tasks.values()}:
                end = self.control.input_ends.of_topic(topic)
                if end is not None and any(
                    end.awaits_checkpoint(t.partition, t.next_offset, t.checkpointed_offset)
                    for t in self.tasks.values()
                    if t.topic == topic
                ):
                    return True
        except Exception as exc:  # the control store must never stop processing
            log.warning("worker %s: reading the input's end failed: %s", self.worker_id, exc)
        return False

    def _time_shares(self, elapsed: float) -> dict[str, float]:
        """Share of the wall time since the last report spent in each part of the work."""
        totals = Counter(self.seconds)
        for task in self.tasks.values():
            totals.update(task.seconds)
        shares = {
            part: round(max(0.0, totals[part] - self._shares_at.get(part, 0.0)) / elapsed, 3)
            for part in TIME_PARTS
        }
        self._shares_at = {part: totals[part] for part in TIME_PARTS}
        return shares

    def _report_final(self, tasks: list[StreamTask]) -> None:
        """A task handed off: its last figures, as ``stopped``."""
        if self.control is None:
            return
        statuses = [self._status(t, self._ends, 0.0, 1.0, {}, "stopped") for t in tasks]
        try:
            self.control.report_tasks(statuses)
        except Exception as exc:  # reporting must never stop processing
            log.warning("worker %s: status report failed: %s", self.worker_id, exc)

    def _status(
        self,
        task: StreamTask,
        ends: dict,
        util: float,
        elapsed: float,
        last_consumed: dict,
        state: str,
    ) -> TaskStatus:
        return task.status(
            self.worker_id,
            ends.get(TopicPartition(task.topic, task.partition), 0),
            busy_s=self.busy_s,
            utilization=util,
            rate_in=(task.consumed - last_consumed.get(task.id, task.consumed)) / elapsed,
            state=state,
        )

    def _shutdown(self) -> None:
        try:
            self._durable(lambda task: task.checkpoint(self._commit(task)))
            self._report(0.0, 1.0, {k: t.consumed for k, t in self.tasks.items()}, "stopped")
            for task in list(self.tasks.values()):
                self._emit("stopped", task, f"at offset {task.next_offset}: the worker stopped")
        finally:
            self.reader.close()
            self.dead_letter_writer.close()  # undelivered letters: not checkpointed
            log.info("worker %s stopped", self.worker_id)
