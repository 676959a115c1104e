"""A stream worker: one process running the tasks the job model gave it.

It consumes its partitions by manual assignment (no group rebalancing: the control plane
decides who runs what), feeds each task its records, flushes and checkpoints on schedule,
and reports per-task metrics to the control store. SIGTERM or SIGINT stop it gracefully,
with a final checkpoint; SIGKILL loses nothing either, since it resumes from the last one.

Utilisation (busy time over wall time) counts decoding, processing, flushes and checkpoints,
not waiting for the broker, so rate / utilisation estimates what the worker could carry. With
``SLUICE_WORKER_MAX_RATE`` set, every batch takes at least ``records / rate`` seconds: the
worker pauses for the rest, in short slices so reports, checkpoints and signals stay prompt,
and a record costs at least ``1 / rate`` of busy time, so autoscalers see the cap as capacity.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from pipelines.config import KafkaSettings, SluiceSettings
from pipelines.control import ControlStore, TaskStatus
from pipelines.kafka import consumer as make_consumer
from pipelines.kafka import end_offsets
from pipelines.kafka import producer as make_producer
from pipelines.storage import ObjectStore
from pipelines.stream.dead_letters import KafkaDeadLetterSink
from pipelines.stream.task import StreamTask
from pipelines.views.model import View

__all__ = ["StreamWorker", "TaskId", "consumer_group"]

log = logging.getLogger(__name__)

THROTTLE_SLICE_S = 0.2
"""A rate-capped worker polls at most ``rate * THROTTLE_SLICE_S`` records at a time, so one
pause is about this long."""


@dataclass(frozen=True, order=True)
class TaskId:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        topic, _, partition = text.rpartition(":")
        if not topic or not partition.isdigit():
            raise ValueError(f"task {text!r} is not TOPIC:PARTITION")
        return cls(topic, int(partition))


def consumer_group(topic: str) -> str:
    """The consumer group whose committed offsets mirror the checkpoints of a topic's tasks."""
    return f"sluice-{topic}"


class StreamWorker:
    def __init__(
        self,
        worker_id: str,
        tasks: Sequence[TaskId],
        views: Sequence[View],
        settings: SluiceSettings,
        bootstrap: str,
        store: ObjectStore,
        control: ControlStore | None = None,
        kafka: KafkaSettings | None = None,
    ) -> None:
        if not tasks:
            raise ValueError(f"worker {worker_id} was given no tasks")
        self.worker_id = worker_id
        self.settings = settings
        self.bootstrap = bootstrap
        self.store = store
        self.control = control
        self.stop_event = threading.Event()
        self.producer = make_producer(bootstrap, kafka)
        sink = KafkaDeadLetterSink(self.producer, settings.dead_letter_topic)
        self.tasks = {
            TopicPartition(t.topic, t.partition): StreamTask(
                t.topic, t.partition, views, store, sink, settings
            )
            for t in tasks
        }
        topics = sorted({t.topic for t in tasks})
        if len(topics) != 1:
            raise ValueError(f"a worker serves one topic's tasks, got {topics}")
        self.consumer = make_consumer(bootstrap, kafka, group_id=consumer_group(topics[0]))
        self.busy_s = 0.0
        self.started_at: float | None = None
        self.last_progress_at: float | None = None
        """Monotonic time of the last batch processed; benchmarks measure up to it."""
        self._ends: dict[TopicPartition, int] = {}

    def install_signal_handlers(self) -> None:
        def _stop(signum: int, _frame: object) -> None:
            log.info("worker %s: signal %d, stopping after a checkpoint", self.worker_id, signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

    def _assign(self) -> None:
        partitions = list(self.tasks)
        self.consumer.assign(partitions)
        beginnings = self.consumer.beginning_offsets(partitions)
        ends = end_offsets(self.consumer, partitions)
        for tp, task in self.tasks.items():
            offset = task.restore()
            if offset is not None and offset > ends.get(tp, 0):
                # The log is shorter than what we checkpointed: the broker lost it (the embedded
                # broker keeps data in memory) or the topic was recreated. Start over.
                log.warning(
                    "%s: checkpoint offset %d is past the log end %d; starting from the log start",
                    task.name,
                    offset,
                    ends.get(tp, 0),
                )
                task.reset()
                offset = None
            if offset is None:
                offset = beginnings.get(tp, 0)
                task.start_at(offset)
            self.consumer.seek(tp, offset)

    def _commit(self, tp: TopicPartition):
        def commit(offset: int) -> None:
            try:
                self.consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
            except KafkaError as exc:  # the checkpoint is the truth; this is a courtesy copy
                log.warning("commit of %s@%d to the consumer group failed: %s", tp, offset, exc)

        return commit

    def run(self, max_idle_s: float | None = None) -> None:
        """Consume until stopped (or, for tests and benchmarks, idle for ``max_idle_s``)."""
        self._assign()
        settings = self.settings
        now = self.started_at = time.monotonic()
        next_flush = now + settings.flush_interval_s
        next_checkpoint = now + settings.checkpoint_interval_s
        next_status = now
        last_status = now
        last_consumed = {tp: t.consumed for tp, t in self.tasks.items()}
        busy_at_status = 0.0
        idle_since: float | None = None  # start of the current run of empty polls
        max_records = settings.poll_max_records
        if settings.worker_max_rate is not None:
            max_records = max(1, min(max_records, int(settings.worker_max_rate * THROTTLE_SLICE_S)))
        try:
            while not self.stop_event.is_set():
                poll_started, poll_cpu = time.monotonic(), time.process_time()
                polled = self.consumer.poll(timeout_ms=200, max_records=max_records)
                if polled:
                    # Waiting in poll for the broker is idle; decoding what it sent is work
                    # (the CPU time of the poll), and so is processing.
                    polled_at = time.monotonic()
                    work_s = min(polled_at - poll_started, time.process_time() - poll_cpu)
                    for tp, records in polled.items():
                        self.tasks[tp].process(records)
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
                    for tp, task in self.tasks.items():
                        task.checkpoint(self._commit(tp))
                    now = time.monotonic()
                    self.busy_s += now - started
                    next_checkpoint = now + settings.checkpoint_interval_s
                    next_flush = now + settings.flush_interval_s
                elif now >= next_flush:
                    started = now
                    for task in self.tasks.values():
                        task.flush()
                    now = time.monotonic()
                    self.busy_s += now - started
                    next_flush = now + settings.flush_interval_s
                if now >= next_status:
                    elapsed = max(now - last_status, 1e-6)
                    util = min(1.0, (self.busy_s - busy_at_status) / elapsed)
                    self._report(util, elapsed, last_consumed)
                    last_consumed = {tp: t.consumed for tp, t in self.tasks.items()}
                    busy_at_status, last_status = self.busy_s, now
                    next_status = now + settings.status_interval_s
                if (
                    max_idle_s is not None
                    and idle_since is not None
                    and now - idle_since > max_idle_s
                ):
                    break
        finally:
            self._shutdown()

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
        ends = end_offsets(self.consumer, list(self.tasks))
        self._ends = ends
        if self.control is None:
            return
        statuses = []
        for tp, task in self.tasks.items():
            counters = task.view_counters()
            valid = task.consumed - task.total_dead_lettered
            statuses.append(
                TaskStatus(
                    task=task.name,
                    topic=task.topic,
                    partition=task.partition,
                    worker_id=self.worker_id,
                    pid=os.getpid(),
                    consumed=task.consumed,
                    processed=valid,
                    dead_lettered=task.total_dead_lettered,
                    dropped_late=max((c["dropped_late"] for c in counters.values()), default=0),
                    busy_s=self.busy_s,
                    utilization=util,
                    rate_in=(task.consumed - last_consumed[tp]) / elapsed,
                    next_offset=task.next_offset,
                    end_offset=ends.get(tp, 0),
                    backlog=max(0, ends.get(tp, 0) - task.next_offset),
                    last_processed_ts=task.last_processed_ts,
                    watermark=task.watermark if task.watermark > 0 else None,
                    checkpointed_offset=task.checkpointed_offset,
                    state=state,
                    views={"counters": counters, "dead_letter_reasons": dict(task.dead_lettered)},
                )
            )
        try:
            self.control.report_tasks(statuses)
            self.control.report_worker(
                self.worker_id, os.getpid(), [t.name for t in self.tasks.values()], state
            )
        except Exception as exc:  # reporting must never stop processing
            log.warning("worker %s: status report failed: %s", self.worker_id, exc)

    def _shutdown(self) -> None:
        try:
            for tp, task in self.tasks.items():
                task.checkpoint(self._commit(tp))
            self._report(0.0, 1.0, {tp: t.consumed for tp, t in self.tasks.items()}, "stopped")
        finally:
            self.consumer.close()
            self.producer.close()
            log.info("worker %s stopped", self.worker_id)
