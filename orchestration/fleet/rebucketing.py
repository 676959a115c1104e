"""The coordinator's key-bucket factor: split partitions into virtual tasks when the live agents
outnumber what whole partitions can keep busy, merge them back when they do not.

The factor for ``n`` running agents is :func:`~orchestration.autoscaling.capacity.bucket_factor`
(the smallest power of two up to ``SLUICE_MAX_BUCKET_FACTOR`` that gives them the most
capacity), so a scale-up the autoscaler chose above the partition count gets the tasks it was
sized for. A change goes one factor step at a time, through the job model's hand-off: the
owner stops the task at a checkpoint and releases it marked ``@split`` (or ``@merge``, both
siblings); the coordinator then rewrites the state (:mod:`pipelines.stream.rebucket`) and, in
one transaction, replaces the rows, which the scheduler then places like any Waiting task.
A merge waits until it has been due for ``SLUICE_BUCKET_MERGE_DELAY_S``, so a lost agent that
is replaced, or a scale-down soon undone, does not merge and split again.
A step once started is finished, even if the target changed meanwhile: its files are already
half moved. Topics with a session view stay whole (a session must stay in one task).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from orchestration.autoscaling.capacity import bucket_factor
from orchestration.fleet.scheduling import MERGE, SPLIT
from pipelines.control import AgentRecord, Assignment, ControlStore
from pipelines.storage import ObjectStore
from pipelines.stream import TaskId
from pipelines.stream.checkpoint import delete_checkpoints
from pipelines.stream.rebucket import RebucketError, merge_tasks, split_task
from pipelines.views.model import View

__all__ = ["Rebucketer"]

log = logging.getLogger(__name__)


class Rebucketer:
    def __init__(
        self,
        control: ControlStore,
        store: ObjectStore,
        topic: str,
        views: Callable[[], Sequence[View]],
        max_factor: int,
        key_field: str,
        merge_delay_s: float = 60.0,
    ) -> None:
        self.control = control
        self.jobs = control.jobs
        self.store = store
        self.topic = topic
        self.views = views
        self.max_factor = max_factor
        self.key_field = key_field
        self.merge_delay_s = merge_delay_s
        self._lower_since: float | None = None
        """Since when the target factor has been below the finest one running."""
        self._warned: set[str] = set()

    def target(self, running_agents: int, partitions: int) -> int:
        """The factor the fleet should run at."""
        if self.max_factor <= 1 or running_agents <= 0 or partitions <= 0:
            return 1
        sessions = [v.name for v in self.views() if v.topic == self.topic and v.is_session]
        if sessions:
            self._warn_once(
                "sessions",
                f"{self.topic} is not split into key buckets: session view(s) "
                f"{', '.join(sessions)} need each session whole in one task",
            )
            return 1
        return bucket_factor(running_agents, partitions, self.max_factor)

    def step(
        self,
        assignments: Sequence[Assignment],
        live: dict[str, AgentRecord],
        partitions: int,
    ) -> list[str]:
        """Finish the splits and merges whose tasks stopped, start the next ones; what it did."""
        running = sum(1 for a in live.values() if a.state == "running")
        target = self._steady(self.target(running, partitions), assignments, time.monotonic())
        by_partition: dict[int, list[tuple[TaskId, Assignment]]] = defaultdict(list)
        for a in assignments:
            by_partition[a.partition].append((TaskId.parse(a.task), a))
        done: list[str] = []
        for partition, tasks in sorted(by_partition.items()):
            try:
                done += self._partition(tasks, target)
            except RebucketError as exc:
                self._warn_once(f"{partition}:{exc}", str(exc))
        return done

    def _steady(self, target: int, assignments: Sequence[Assignment], now: float) -> int:
        """The target, except that a merge waits until it has been due for ``merge_delay_s``:
        an agent lost and replaced, or a scale-down soon undone, should not merge and split
        again (each moves every task's state)."""
        finest = max((TaskId.parse(a.task).factor for a in assignments), default=1)
        if target >= finest:
            self._lower_since = None
            return target
        if self._lower_since is None:
            self._lower_since = now
        return target if now - self._lower_since >= self.merge_delay_s else finest

    def _partition(self, tasks: list[tuple[TaskId, Assignment]], target: int) -> list[str]:
        marked = {t: a for t, a in tasks if a.handoff_to in (SPLIT, MERGE)}
        stopped = {t: a for t, a in marked.items() if a.state == "Waiting"}
        done: list[str] = []
        for task, a in stopped.items():
            if a.handoff_to == SPLIT:
                done += self._split(task, a)
        merging = {t: a for t, a in stopped.items() if a.handoff_to == MERGE}
        for task, a in merging.items():
            sibling = _sibling(task)
            if task.bucket < sibling.bucket and sibling in merging:
                done += self._merge(task, a, sibling, merging[sibling])
        if marked:
            return done  # one step at a time per partition
        running = {t: a for t, a in tasks if a.state == "Running" and not a.handoff_to}
        if any(t.factor < target for t, _ in tasks):
            for task, a in running.items():
                if task.factor < target:
                    why = f"split {task} into {task.factor * 2} buckets: target factor {target}"
                    if self.jobs.request_handoff(a.task, a.generation, SPLIT, why):
                        done.append(f"{a.task}: stop for a split (target factor {target})")
        elif (top := max(t.factor for t, _ in tasks)) > target:
            for task in list(running):  # the finest buckets first, so factors even out
                sibling = _sibling(task)
                if task.factor == top and task.bucket < sibling.bucket and sibling in running:
                    why = f"merge {task} and {sibling}: target factor {target}"
                    for t in (task, sibling):
                        b = running[t]
                        if self.jobs.request_handoff(b.task, b.generation, MERGE, why):
                            done.append(f"{b.task}: stop for a merge (target factor {target})")
        return done

    def _split(self, task: TaskId, a: Assignment) -> list[str]:
        low, high = split_task(self.store, self.views(), self.key_field, task)
        reason = f"split from {task}"
        new = [(str(low), task.partition), (str(high), task.partition)]
        if not self.jobs.replace_tasks(self.topic, {a.task: a.generation}, new, reason):
            return []
        delete_checkpoints(self.store, task.topic, task.partition, *task.where)
        self.control.forget_tasks([a.task])
        text = f"{task}: split into {low} and {high}"
        log.info(text)
        return [text]

    def _merge(self, low: TaskId, a: Assignment, high: TaskId, b: Assignment) -> list[str]:
        merged = merge_tasks(self.store, self.views(), low, high)
        reason = f"merged from {low} and {high}"
        old = {a.task: a.generation, b.task: b.generation}
        if not self.jobs.replace_tasks(self.topic, old, [(str(merged), low.partition)], reason):
            return []
        for child in (low, high):
            delete_checkpoints(self.store, child.topic, child.partition, *child.where)
        self.control.forget_tasks([a.task, b.task])
        text = f"{low} and {high}: merged into {merged}"
        log.info(text)
        return [text]

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(text)


def _sibling(task: TaskId) -> TaskId:
    half = task.factor // 2
    bucket = task.bucket + half if task.bucket < half else task.bucket - half
    return TaskId(task.topic, task.partition, bucket, task.factor)
