"""Lag as the broker and the workers see it: per task, how far behind and for how long.

Offset lag (backlog) comes from the workers' reports (log end minus next offset, with the
embedded broker's under-reporting corrected). Time lag is the newest produced record's
timestamp minus the newest processed one's, the way Metamarkets compared the last message
written with the last message read.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass

from kafka import TopicPartition
from kafka.errors import KafkaError

from orchestration.control_plane.runtime import Runtime
from pipelines.config import KafkaSettings
from pipelines.control import TaskStatus
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka import consumer, end_offsets
from pipelines.stream import TaskId
from pipelines.stream.buckets import backlog_share

__all__ = [
    "STATUS_ORDER",
    "LagSample",
    "LagTracker",
    "ProducedProbe",
    "TaskLag",
    "collect_task_lags",
    "lag_status",
    "newest_produced_timestamps",
    "task_lags",
    "worst",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskLag:
    status: TaskStatus
    backlog: int
    time_lag_s: float | None
    heartbeat_age_s: float
    stale: bool


class ProducedProbe:
    """Reads, per partition, the log end and the newest record's timestamp with one long-lived
    consumer: `up` and `status` ask every two seconds, and a consumer per question cost a
    connection, a metadata round trip and kafka-python's shutdown noise each time."""

    def __init__(self, bootstrap: str | Callable[[], str], kafka: KafkaSettings | None = None):
        self.bootstrap = bootstrap
        """The broker, or how to find it when first asked (it may not run yet)."""
        self.kafka = kafka
        self._client = None

    def newest(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int | None]]:
        """Per partition: (log end offset, timestamp of the last record or None if empty)."""
        result: dict[int, tuple[int, int | None]] = {}
        try:
            if self._client is None:
                bootstrap = self.bootstrap() if callable(self.bootstrap) else self.bootstrap
                self._client = consumer(bootstrap, self.kafka, fetch_max_wait_ms=50)
            client = self._client
            tps = [TopicPartition(topic, p) for p in partitions]
            client.assign(tps)
            client.resume(*tps)
            ends = end_offsets(client, tps)
            pending = {}
            for tp in tps:
                if ends[tp] > 0:
                    client.seek(tp, ends[tp] - 1)
                    pending[tp] = ends[tp]
                else:
                    result[tp.partition] = (0, None)
            deadline = time.monotonic() + 2.0
            while pending and time.monotonic() < deadline:
                for tp, records in client.poll(timeout_ms=200).items():
                    if records and tp in pending:
                        last = records[-1]
                        end = max(pending.pop(tp), last.offset + 1)
                        result[tp.partition] = (end, last.timestamp)
                        client.pause(tp)
            for tp, end in pending.items():
                result[tp.partition] = (end, None)
        except KafkaError as exc:
            log.warning("cannot read the newest records of %s: %s", topic, exc)
            self.close()  # a fresh connection next time
        return result

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close()
            except Exception as exc:  # closing a broken client must not fail the caller
                log.debug("closing the lag probe: %s", exc)


def newest_produced_timestamps(
    bootstrap: str, topic: str, partitions: Sequence[int], kafka: KafkaSettings | None = None
) -> dict[int, tuple[int, int | None]]:
    """One look with a consumer of its own (see :class:`ProducedProbe` for repeated looks)."""
    probe = ProducedProbe(bootstrap, kafka)
    try:
        return probe.newest(topic, partitions)
    finally:
        probe.close()


def bucket_factor_of(task: str) -> int:
    """The key-bucket factor of a task by its name (1 for a whole partition)."""
    try:
        return TaskId.parse(task).factor
    except ValueError:
        return 1


def task_lags(
    statuses: Sequence[TaskStatus],
    produced: dict[str, dict[int, tuple[int, int | None]]] | None = None,
    *,
    stale_after_s: float = 300.0,
    now: float | None = None,
) -> list[TaskLag]:
    """Combine worker reports with what the broker holds now (``produced`` per topic)."""
    now = time.time() if now is None else now
    lags = []
    for status in statuses:
        end, newest_ts = (produced or {}).get(status.topic, {}).get(status.partition, (None, None))
        gap = max(0, (end if end is not None else status.end_offset) - status.next_offset)
        backlog = backlog_share(gap, bucket_factor_of(status.task))
        time_lag = None
        if backlog == 0:
            time_lag = 0.0
        elif newest_ts is not None and status.last_processed_ts is not None:
            time_lag = max(0.0, (newest_ts - status.last_processed_ts) / 1000)
        age = now - status.heartbeat_at
        lags.append(TaskLag(status, backlog, time_lag, age, age > stale_after_s))
    return lags


def collect_task_lags(
    runtime: Runtime, stale_after_s: float = 300.0, probe: ProducedProbe | None = None
) -> list[TaskLag]:
    """Every task's lag now: the workers' reports joined with what the broker holds (what the
    workers last reported alone when the broker does not answer). Pass a ``probe`` when
    asking repeatedly."""
    statuses = runtime.control.tasks()
    produced = {}
    try:
        bootstrap = runtime.bootstrap()
        for topic in sorted({s.topic for s in statuses}):
            parts = sorted({s.partition for s in statuses if s.topic == topic})
            if probe is not None:
                produced[topic] = probe.newest(topic, parts)
            else:
                produced[topic] = newest_produced_timestamps(bootstrap, topic, parts, runtime.kafka)
    except BrokerUnavailable:
        pass
    return task_lags(statuses, produced, stale_after_s=stale_after_s)


STATUS_ORDER = ("OK", "WARN", "STALL", "STOP", "ERR")
"""Burrow's statuses, best to worst; a fleet's status is its worst task's."""


@dataclass(frozen=True)
class LagSample:
    time: float
    offset: int
    backlog: int
    heartbeat_age_s: float


def lag_status(window: Sequence[LagSample], stale_after_s: float = 300.0) -> str:
    """Burrow's evaluation of one task over a sliding window of samples (oldest first).

    OK: lag reached zero in the window (or too few samples to say otherwise); STOP: the
    worker stopped reporting; ERR: the offset went backwards; STALL: the offset did not move
    while lag > 0; WARN: the offset moves but lag grew across the whole window.
    """
    if not window:
        return "OK"
    last = window[-1]
    if last.heartbeat_age_s > stale_after_s and last.backlog > 0:
        return "STOP"
    if any(b.offset < a.offset for a, b in itertools.pairwise(window)):
        return "ERR"
    if any(s.backlog == 0 for s in window) or len(window) < 3:
        return "OK"
    if window[0].offset == last.offset:
        return "STALL"
    if all(b.backlog >= a.backlog for a, b in itertools.pairwise(window)) and (
        last.backlog > window[0].backlog
    ):
        return "WARN"
    return "OK"


def worst(statuses: Sequence[str]) -> str:
    return max(statuses, key=STATUS_ORDER.index, default="OK")


class LagTracker:
    """Burrow's sliding window per task, kept between looks: what `sluice status`, `up` and
    the ``realtime_lag`` sensor (through its cursor, :meth:`state`) rate tasks with, so they
    rate a task alike.

    A task whose generation changed moved to a new owner, which resumed from the task's
    checkpoint: its offset going back is that owner's start, not an error, so its window
    starts afresh. Backlogs are the :class:`TaskLag`'s (a key bucket's share of its
    partition's gap).
    """

    def __init__(self, window: int = 10, stale_after_s: float = 300.0) -> None:
        self.window = window
        self.stale_after_s = stale_after_s
        self.samples: dict[str, deque[LagSample]] = {}
        self.generations: dict[str, int] = {}

    def update(self, lags: Sequence[TaskLag], now: float | None = None) -> dict[str, str]:
        """Add one look at every task; each task's Burrow status over its window."""
        now = time.time() if now is None else now
        out = {}
        for lag in lags:
            task, generation = lag.status.task, lag.status.generation
            if self.generations.get(task, generation) != generation:
                self.samples.pop(task, None)
            self.generations[task] = generation
            samples = self.samples.setdefault(task, deque(maxlen=self.window))
            samples.append(LagSample(now, lag.status.next_offset, lag.backlog, lag.heartbeat_age_s))
            out[task] = lag_status(list(samples), self.stale_after_s)
        return out

    def state(self) -> dict[str, object]:
        """The windows as JSON-able values (a sensor keeps them in its cursor)."""
        return {
            "generations": dict(self.generations),
            "samples": {t: [astuple(s) for s in window] for t, window in self.samples.items()},
        }

    @classmethod
    def from_state(
        cls, state: dict | None, window: int = 10, stale_after_s: float = 300.0
    ) -> LagTracker:
        tracker = cls(window, stale_after_s)
        state = state or {}
        tracker.generations = {t: int(g) for t, g in state.get("generations", {}).items()}
        for task, samples in state.get("samples", {}).items():
            tracker.samples[task] = deque((LagSample(*s) for s in samples), maxlen=window)
        return tracker
