"""The coordinator's key-bucket factor: split partitions into virtual tasks when the live agents
outnumber what whole partitions can keep busy, merge them back when they do not.

The factor for ``n`` running agents is
:func:`~orchestration.control_plane.autoscaling.capacity.bucket_factor` (the smallest power of two
up to ``SLUICE_MAX_BUCKET_FACTOR`` that gives them the most capacity), so a scale-up the autoscaler
chose above the partition count gets the tasks it was sized for. A change goes one factor step at a
time, through the job model's hand-off: the owner stops the task at a checkpoint and releases it
marked ``@split`` (or ``@merge``, both siblings); the coordinator then rewrites the state
(:mod:`pipelines.stream.rebucket`) and, in one transaction, replaces the rows, which the scheduler
then places like any Waiting task. A merge waits until it has been due for
``SLUICE_BUCKET_MERGE_DELAY_S``, so a lost agent that is replaced, or a scale-down soon undone, does
not merge and split again. A step once started is finished, even if the target changed meanwhile:
its files may already be half moved. Topics with a session view stay whole (a session must stay in
one task).

Every step finishes or rolls back, decided from the job model alone, so whichever coordinator
holds the lease next (with nothing in memory) does the same:
- a task stopped ``@split``, or both halves of a merge stopped ``@merge``: the storage rewrite
  may have run, so the step is done (again: the rewrite is deterministic) and never cancelled;
- a merge whose other half is no longer marked (its owner was lost or restarted, it went back
  to Running, Scheduled or Waiting, or it is gone): the storage rewrite cannot have run, so
  the mark is cancelled (:meth:`JobModelStore.cancel_handoff`) and the task is scheduled as it
  is; the next pass may start the merge again;
- a step refused by the rewrite (:class:`RebucketError`, raised before anything is written):
  cancelled, and the partition is not rebucketed again for ``retry_after_s``;
- a task retired (replaced) whose status row and checkpoints were not removed yet: removed.

Fencing: the storage rewrite carries the coordinator's lease term. Before its first decision of
a term about a marked task (a step, a cancel, the watchdog's), the coordinator raises every
view's rewrite record to that term (:func:`pipelines.segments.fence`, which also finishes a
rewrite a predecessor made visible but left unfinished), so a former leader, paused and resumed,
has its rewrite refused (:class:`~pipelines.segments.RewriteFenced`): it writes nothing readers
see. A refused step is logged and left to the leader of the newer
term (by the rules above); this coordinator starts no step under its old term again.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from orchestration.control_plane.autoscaling.capacity import bucket_factor
from orchestration.control_plane.fleet.scheduling import MERGE, SPLIT
from pipelines.control import AgentRecord, Assignment, ControlStore
from pipelines.kinds import kind_of
from pipelines.segments import RewriteFenced, fence
from pipelines.storage import ObjectStore
from pipelines.stream import TaskId
from pipelines.stream.checkpoint import delete_checkpoints
from pipelines.stream.rebucket import RebucketError, merge_tasks, split_task
from pipelines.views.model import View

__all__ = ["Rebucketer", "sibling"]

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
        retry_after_s: float = 60.0,
    ) -> None:
        self.control = control
        self.jobs = control.jobs
        self.store = store
        self.topic = topic
        self.views = views
        self.max_factor = max_factor
        self.key_field = key_field
        self.merge_delay_s = merge_delay_s
        self.retry_after_s = retry_after_s
        self._refused: dict[int, float] = {}
        """Partition -> until when no new step starts there (its last one was refused)."""
        self._lower_since: float | None = None
        """Since when the target factor has been below the finest one running."""
        self._warned: set[str] = set()
        self.term = 0
        """The lease term this coordinator's rewrites carry (0 outside a leased fleet)."""
        self._fenced_term: int | None = None
        """The term whose fence was written (None: not yet)."""
        self._refused_term = -1
        """The highest term a newer coordinator fenced off: no step runs under it."""

    def target(self, running_agents: int, partitions: int) -> int:
        """The factor the fleet should run at."""
        if self.max_factor <= 1 or running_agents <= 0 or partitions <= 0:
            return 1
        refusals = {
            v.name: refusal
            for v in self.views()
            if v.topic == self.topic and (refusal := kind_of(v).bucket_refusal(v)) is not None
        }
        if refusals:
            self._warn_once(
                "sessions",
                f"{self.topic} is not split into key buckets: "
                + "; ".join(f"view {name}: {why}" for name, why in refusals.items()),
            )
            return 1
        return bucket_factor(running_agents, partitions, self.max_factor)

    def step(
        self,
        assignments: Sequence[Assignment],
        live: dict[str, AgentRecord],
        partitions: int,
        term: int | None = None,
    ) -> list[str]:
        """Finish the splits and merges whose tasks stopped, start the next ones; what it did.
        ``term``: the coordinator lease's term this pass runs under (None: no lease, no fence)."""
        if not self.fence(term, assignments):
            return []
        running = sum(1 for a in live.values() if a.state == "running")
        target = self._steady(self.target(running, partitions), assignments, time.monotonic())
        by_partition: dict[int, list[tuple[TaskId, Assignment]]] = defaultdict(list)
        for a in assignments:
            by_partition[a.partition].append((TaskId.parse(a.task), a))
        done: list[str] = []
        for _, tasks in sorted(by_partition.items()):
            done += self._partition(tasks, target)
        return done + self._forget_retired({a.task for a in assignments})

    def fence(self, term: int | None, assignments: Sequence[Assignment]) -> bool:
        """Before this pass decides anything about a split or merge under way: raise the views'
        rewrite records to ``term``, once per term, if any task is marked for a step (only
        then can a former leader be part-way through its rewrite). False if a newer term
        already did: this coordinator is a former leader and leaves every step alone."""
        if term is None:
            return True
        if term <= self._refused_term:
            return False
        self.term = term
        if self._fenced_term == term or not any(
            a.handoff_to in (SPLIT, MERGE) for a in assignments
        ):
            return True
        names = [v.name for v in self.views() if v.topic == self.topic]
        try:
            fence(self.store, names, term)
        except RewriteFenced as exc:
            self._fenced_off(exc)
            return False
        self._fenced_term = term
        return True

    def _fenced_off(self, exc: RewriteFenced) -> None:
        self._refused_term = max(self._refused_term, exc.term)
        log.warning("%s; this coordinator leaves the step to the newer one", exc)

    def _forget_retired(self, known: set[str]) -> list[str]:
        """Finish what a coordinator that died after replacing rows left undone: a task that
        is no longer in the job model but still has a status row (or got one from its owner's
        late report) loses the row and its checkpoints. Only in partitions where no step is
        under way, so a step's rewritten checkpoints are never touched. The job model is read
        after the status rows: a task reported by its owner is in it unless it was retired."""
        reported = [t for t in self.control.tasks() if t.topic == self.topic]
        if all(t.task in known for t in reported):
            return []  # the common case: nothing retired, no second read
        model = self.jobs.assignments(self.topic)
        current = {a.task for a in model}
        busy = {a.partition for a in model if a.handoff_to in (SPLIT, MERGE)}
        retired = [t.task for t in reported if t.task not in current and t.partition not in busy]
        for name in retired:
            task = TaskId.parse(name)
            delete_checkpoints(self.store, task.topic, task.partition, *task.where)
        if retired:
            self.control.forget_tasks(retired)
            log.info("forgot the retired tasks %s (status rows and checkpoints)", retired)
        return [f"{name}: retired, its status and checkpoints removed" for name in retired]

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
        done: list[str] = []
        for task, a in marked.items():
            if a.handoff_to == SPLIT and a.state == "Waiting":
                done += self._split(task, a)
        merging = {t: a for t, a in marked.items() if a.handoff_to == MERGE}
        rows = dict(tasks)
        for task, a in sorted(merging.items()):
            other = sibling(task)
            partner = merging.get(other)
            if partner is None:
                now = rows[other].state if other in rows else "gone"
                why = f"merge of {task} cancelled: {other} is not stopping for it ({now})"
                done += self._cancel([a], why)
            elif task.bucket < other.bucket and a.state == partner.state == "Waiting":
                done += self._merge(task, a, other, partner)
        if marked:
            return done  # one step at a time per partition
        partition = tasks[0][0].partition
        if time.monotonic() < self._refused.get(partition, 0.0):
            return done
        running = {t: a for t, a in tasks if a.state == "Running" and not a.handoff_to}
        if any(t.factor < target for t, _ in tasks):
            for task, a in running.items():
                if task.factor < target:
                    why = f"split {task} into {task.factor * 2} buckets: target factor {target}"
                    if self.jobs.request_handoff(a.task, a.generation, SPLIT, why):
                        done.append(f"{a.task}: stop for a split (target factor {target})")
        elif (top := max(t.factor for t, _ in tasks)) > target:
            for task in list(running):  # the finest buckets first, so factors even out
                other = sibling(task)
                if task.factor == top and task.bucket < other.bucket and other in running:
                    why = f"merge {task} and {other}: target factor {target}"
                    for t in (task, other):
                        b = running[t]
                        if self.jobs.request_handoff(b.task, b.generation, MERGE, why):
                            done.append(f"{b.task}: stop for a merge (target factor {target})")
        return done

    def hold(self, partition: int) -> None:
        """Start no split or merge in ``partition`` for ``retry_after_s`` (the watchdog
        cancelled one there: asking again at once would block the same task again)."""
        self._refused[partition] = time.monotonic() + self.retry_after_s

    def _cancel(self, marked: list[Assignment], reason: str) -> list[str]:
        """Roll back a step whose storage rewrite has not run: clear the marks."""
        done = []
        for a in marked:
            if self.jobs.cancel_handoff(a.task, a.generation, reason):
                log.warning("%s: %s", a.task, reason)
                done.append(f"{a.task}: {reason}")
        return done

    def _refuse(self, task: TaskId, marked: list[Assignment], exc: RebucketError) -> list[str]:
        """The rewrite refused the step before writing anything: cancel it, and start none in
        this partition for a while (it would be refused again)."""
        self.hold(task.partition)
        return self._cancel(marked, f"{marked[0].handoff_to} of {task} cancelled: {exc}")

    def _split(self, task: TaskId, a: Assignment) -> list[str]:
        try:
            low, high = split_task(self.store, self.views(), self.key_field, task, self.term)
        except RebucketError as exc:
            return self._refuse(task, [a], exc)
        except RewriteFenced as exc:
            self._fenced_off(exc)
            return []
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
        try:
            merged = merge_tasks(self.store, self.views(), low, high, self.term)
        except RebucketError as exc:
            return self._refuse(low, [a, b], exc)
        except RewriteFenced as exc:
            self._fenced_off(exc)
            return []
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


def sibling(task: TaskId) -> TaskId:
    """The other half of the task ``task`` would merge back into."""
    half = task.factor // 2
    bucket = task.bucket + half if task.bucket < half else task.bucket - half
    return TaskId(task.topic, task.partition, bucket, task.factor)
