"""The coordinator: whoever holds the lease applies :func:`plan_changes` to the job model
(and times each rescale, :mod:`orchestration.control_plane.fleet.rescales`, and splits or merges key
buckets, :mod:`orchestration.control_plane.fleet.rebucketing`).

Any agent may hold the ``coordinator`` lease (a row in the control store with a term and an
expiry); it renews it every tick and loses it if it stops renewing, so when the leader dies
another agent takes over within one lease. Every change is conditional on the generation it
was planned from: a change planned on a stale view of the model, or by a leader that lost its
lease while paused, matches no row and is dropped. Storage rewrites (splits and merges) carry
the lease's term as a fencing token (:mod:`orchestration.control_plane.fleet.rebucketing`).

The watchdog: while a running agent exists, no task stays Waiting longer than
``waiting_max_s`` (``SLUICE_TASK_WAITING_MAX_S``). A Waiting task without a mark is scheduled
by :func:`plan_changes` anyway; one stopped for a merge whose other half has not stopped (its
owner does not stop it) gets both marks cancelled, with the reason in the job history, and is
scheduled as it is. A split or a merge whose halves both stopped may have rewritten storage,
so it is never cancelled: it is retried every pass, and named as overdue by ``sluice status``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from orchestration.control_plane.fleet.rebucketing import Rebucketer, sibling
from orchestration.control_plane.fleet.rescales import RescaleMeter
from orchestration.control_plane.fleet.scheduling import (
    MERGE,
    Change,
    live_agents,
    plan_changes,
    waiting_too_long,
)
from pipelines.control import AgentRecord, Assignment, JobModelStore
from pipelines.stream import TaskId

__all__ = ["COORDINATOR_LEASE", "Coordinator"]

log = logging.getLogger(__name__)

COORDINATOR_LEASE = "coordinator"


class Coordinator:
    def __init__(
        self,
        jobs: JobModelStore,
        topic: str,
        partitions: Callable[[], list[int]],
        loss_after_s: float,
        meter: RescaleMeter | None = None,
        rebucketer: Rebucketer | None = None,
        waiting_max_s: float = 60.0,
    ) -> None:
        self.jobs = jobs
        self.rebucketer = rebucketer
        """Splits and merges partitions' key buckets (None: one task per partition)."""
        self.meter = meter
        """Records what each rescale paused (None: not measured)."""
        self.topic = topic
        self.partitions = partitions
        self.loss_after_s = loss_after_s
        self.waiting_max_s = waiting_max_s
        self.known_partitions: list[int] = []
        self.next_partition_check = 0.0

    def reconcile(self, term: int | None = None) -> list[str]:
        """One pass: make sure every partition has a task, then apply the plan; what changed.
        ``term``: the lease's term, the fencing token of the pass's storage rewrites."""
        now = time.time()
        if now >= self.next_partition_check or not self.known_partitions:
            self.known_partitions = sorted(self.partitions())
            self.jobs.ensure_tasks(self.topic, self.known_partitions)
            self.next_partition_check = now + 30.0
        assignments = self.jobs.assignments(self.topic)
        agents = self.jobs.agents()
        live = live_agents(agents, now, self.loss_after_s)
        # a former leader (a newer term fenced the rewrites) touches no split or merge
        fenced_off = self.rebucketer is not None and not self.rebucketer.fence(term, assignments)
        done = [] if fenced_off else self._watchdog(assignments, live, now)
        if done:
            assignments = self.jobs.assignments(self.topic)
        if self.rebucketer is not None and not fenced_off:
            rebucketed = self.rebucketer.step(
                assignments, live, len(self.known_partitions), term=term
            )
            if rebucketed:
                done += rebucketed
                assignments = self.jobs.assignments(self.topic)
        changes = plan_changes(assignments, agents, now, self.loss_after_s)
        if self.meter is not None:
            try:
                self.meter.observe(now, agents, live, assignments, len(changes))
            except Exception:  # a measurement must never stop the coordinator
                log.exception("measuring the rescale of %s failed", self.topic)
        return done + [text for change in changes if (text := self._apply(change))]

    def _watchdog(
        self, assignments: list[Assignment], live: dict[str, AgentRecord], now: float
    ) -> list[str]:
        """Cancel the merges that kept a task Waiting too long while their other half runs on
        (the storage rewrite needs both stopped, so it has not run)."""
        if not any(a.state == "running" for a in live.values()):
            return []
        rows = {a.task: a for a in assignments}
        done = []
        for a in waiting_too_long(assignments, now, self.waiting_max_s):
            if a.handoff_to != MERGE:
                continue
            partner = rows.get(str(sibling(TaskId.parse(a.task))))
            if partner is not None and partner.state == "Waiting" and partner.handoff_to == MERGE:
                continue  # both stopped: the rewrite may have run, the step must finish
            why = (
                f"watchdog: Waiting for a merge for {now - a.since:.0f}s "
                f"(SLUICE_TASK_WAITING_MAX_S {self.waiting_max_s:g}s); merge cancelled"
            )
            for t in (a, partner):
                if (
                    t is not None
                    and t.handoff_to == MERGE
                    and self.jobs.cancel_handoff(t.task, t.generation, why)
                ):
                    log.warning("%s: %s", t.task, why)
                    done.append(f"{t.task}: {why}")
                    if self.rebucketer is not None:
                        self.rebucketer.hold(t.partition)
        return done

    def _apply(self, change: Change) -> str | None:
        if change.kind == "unassign":
            done = self.jobs.unassign(
                change.task, change.generation, change.agent_id or "", change.reason
            )
        elif change.kind == "schedule":
            done = (
                self.jobs.schedule(
                    change.task, change.generation, change.agent_id or "", change.reason
                )
                is not None
            )
        else:
            done = self.jobs.request_handoff(
                change.task, change.generation, change.agent_id or "", change.reason
            )
        if not done:
            log.info("%s of %s skipped: the job model changed meanwhile", change.kind, change.task)
            return None
        text = f"{change.task}: {change.kind} ({change.reason})"
        log.info(text)
        return text
