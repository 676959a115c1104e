"""An agent: runs on any host and runs the stream tasks the job model gives it.

One process, two threads. The worker thread is a :class:`StreamWorker` consuming the agent's
partitions. The control thread, every ``SLUICE_AGENT_HEARTBEAT_INTERVAL_S``, renews the
agent's heartbeat, tries to hold the coordinator lease (and re-plans the job model if it does),
and makes the worker run what the job model says: start what is assigned to this agent, stop
at a checkpoint what is being handed off, drop without writing what moved to a newer
generation. Each task asks the job model before every write whether this agent still owns it
at its generation (the fence), so an agent that was paused past its loss threshold and comes
back writes nothing.

A task that crashes (any exception while it processes a batch) is restarted from its
checkpoint; the crash is kept in the control store's crash log with the offsets it was
processing, and the restarted task takes those offsets one record at a time, so a record that
crashes it again is quarantined: dead-lettered as ``crashed_task`` and skipped
(:mod:`pipelines.control.crashes`). Mist's rule disables a view on a task after
``SLUICE_VIEW_CRASH_LIMIT`` crashes that no quarantine explains, or after more quarantines than
that (it fails on everything), within ``SLUICE_VIEW_CRASH_WINDOW_S``; the task restarts
without it. Input never stops the agent itself.

When the views in force change (a deployment in the control store, a Disabled state, an edit
of the views file) the agent reloads them and restarts its tasks in place, each at a
checkpoint, within ``VIEW_CHECK_S``; no supervisor is needed for that on other machines. A
change of a topic's declaration that the archive or the deployed views cannot follow (a
column's type changed, a column a deployed view uses removed: :mod:`pipelines.views.evolution`)
is refused: the agent keeps the views it runs and logs why, once per change
(:attr:`Agent.refused`).

With ``SLUICE_SPOT_IMDS_URL`` set, a third thread polls the instance metadata service: on a
spot interruption notice the agent evacuates itself (draining: every task stops at a
checkpoint at once and is released to the others), so the work moves even when Dagster is
down; a rebalance recommendation is recorded for the sensor that starts a replacement.

SIGTERM or SIGINT stop the agent gracefully: every task checkpoints and is released, so the
coordinator moves it at once rather than after the loss threshold. A stop takes at most
``SLUICE_STOP_TIMEOUT_S``: with the control store, the broker or the storage gone, the agent
gives up on what it could not finish, says so in its log and exits; its tasks then move when
the coordinator sees it lost. The worker loop runs in a thread of its own so that the main
thread is always free to take a signal.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError

from orchestration.control_plane.fleet.coordinator import COORDINATOR_LEASE, Coordinator
from orchestration.control_plane.fleet.imds import InstanceMetadata, Notice
from orchestration.control_plane.fleet.publishing import PublisherRunner
from orchestration.control_plane.fleet.rebucketing import Rebucketer
from orchestration.control_plane.fleet.rescales import RescaleMeter
from orchestration.control_plane.runtime import Runtime
from pipelines.control import TaskCrash, crash_plan
from pipelines.exceptions import ViewDefinitionError
from pipelines.kafka import partitions_of
from pipelines.stopping import StopDeadline
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.stream.worker import TaskEvent
from pipelines.views.evolution import check_types, declared_types
from pipelines.views.model import View

__all__ = ["VIEW_CHECK_S", "Agent"]

log = logging.getLogger(__name__)

VIEW_CHECK_S = 5.0
"""How often an agent checks whether the views in force changed."""


class Agent:
    def __init__(
        self,
        runtime: Runtime,
        agent_id: str,
        topic: str | None = None,
        views_file: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.agent_id = agent_id
        self.topic = topic or runtime.settings.topic
        self.views_file = views_file
        self.views: Sequence[View]
        self.views, self.view_version = runtime.running_views(views_file)
        self.next_view_check = time.monotonic() + VIEW_CHECK_S
        self.refused: str | None = None
        """Why the newest change of the views in force was refused (None: none is)."""
        self.reloading: set[str] = set()
        """Tasks stopped at a checkpoint to start again with new views (not released)."""
        self.stale_starts: set[str] = set()
        """Tasks asked to start with views that changed before they started: each is stopped
        at a checkpoint to start again with the new ones once it reports started."""
        self.jobs = runtime.control.jobs
        self.stopping = threading.Event()
        self.deadline = StopDeadline(self.settings.stop_timeout_s, f"agent {agent_id}")
        self.owns_process = False
        """Set by :meth:`install_signal_handlers`: the agent is the process and may end it."""
        self.requested: dict[str, int] = {}
        """Task -> generation asked of the worker and not yet reported started or lost."""
        self.handing_off: set[str] = set()
        self.lock = threading.Lock()
        self.coordinator = Coordinator(
            self.jobs,
            self.topic,
            self._partitions,
            self.settings.agent_loss_after_s,
            RescaleMeter(runtime.control, self.topic),
            Rebucketer(
                runtime.control,
                runtime.store,
                self.topic,
                lambda: self.views,
                self.settings.max_bucket_factor,
                self.settings.key_field,
                self.settings.bucket_merge_delay_s,
                self.settings.task_waiting_max_s,
            ),
            self.settings.task_waiting_max_s,
        )
        self.publisher = PublisherRunner(
            runtime.store,
            lambda: runtime.tables,
            lambda: self.views,
            self.settings,
            self._no_other_leader,
        )
        """Commits the views' realtime hours to their tables while this agent leads."""
        self.worker = StreamWorker(
            agent_id,
            [],
            self.views,
            self.settings,
            open_worker_clients(runtime.bootstrap(), runtime.kafka, self.topic),
            runtime.store,
            runtime.control,
            topic=self.topic,
            on_event=self._on_event,
        )

    def _no_other_leader(self) -> bool:
        """Asked before each realtime commit: False once another agent holds the coordinator
        lease (this one's own, even expired during a graceful stop, still counts)."""
        try:
            lease = self.jobs.lease(COORDINATOR_LEASE)
        except SQLAlchemyError:
            return False
        return lease is None or lease["holder"] == self.agent_id

    def lead_the_last_pass(self, deadline: float) -> int | None:
        """Asked at a graceful stop of an agent that did not lead: the term of the coordinator
        lease it takes to publish what is left, or None. Taken once no one holds it (the fleet's last
        agent; a stopping leader releases it after its own last pass, which may have come before
        this agent's final flush). None once the holder renews it: a live leader publishes the
        rest. None at ``deadline`` (monotonic) or when the control store is away."""
        seen = None
        while time.monotonic() < deadline:
            try:
                ttl = self.settings.agent_loss_after_s
                term = self.jobs.acquire_lease(COORDINATOR_LEASE, self.agent_id, ttl)
                if term:
                    log.info("agent %s leads the last publish pass of its stop", self.agent_id)
                    return term
                lease = self.jobs.lease(COORDINATOR_LEASE)
            except SQLAlchemyError:
                return None
            expires = lease["expires_at"] if lease else None
            if seen is not None and expires is not None and expires > seen:
                return None
            seen = expires
            time.sleep(min(self.settings.agent_heartbeat_interval_s, 0.5))
        return None

    def _partitions(self) -> list[int]:
        return partitions_of(self.runtime.bootstrap(), self.runtime.kafka, self.topic)

    # --- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        released = self.jobs.register_agent(
            self.agent_id, socket.gethostname(), os.getpid(), self.topic
        )
        log.info(
            "agent %s registered (pid %d)%s",
            self.agent_id,
            os.getpid(),
            f"; released what its last incarnation held: {released}" if released else "",
        )
        control = threading.Thread(target=self._control_loop, name="agent-control", daemon=True)
        control.start()
        if self.settings.spot_imds_url:
            threading.Thread(target=self._spot_loop, name="agent-spot", daemon=True).start()
        failed: list[BaseException] = []

        def work() -> None:
            try:
                self.worker.run()
            except BaseException as exc:  # re-raised by the main thread: the agent fails
                failed.append(exc)

        worker = threading.Thread(target=work, name="agent-worker", daemon=True)
        worker.start()
        try:
            while worker.is_alive():  # the main thread stays free to take signals
                worker.join(0.5)
        finally:
            if self.owns_process:  # however the worker ended, the rest of the stop is bounded
                self.deadline.arm()
            self.stopping.set()
            self.worker.stop_event.set()
            worker.join(self.settings.stop_timeout_s)
            control.join(timeout=1.0)
            # A pass under way ends before the process does: a daemon thread frozen inside
            # pyiceberg's or Arrow's I/O when the interpreter finalizes can hang the exit for
            # good (CI met an agent that logged its stop, then never exited). A leader then
            # publishes what its tasks' last flush wrote. The stop deadline bounds both.
            self.publisher.final(self.settings.stop_timeout_s, self.lead_the_last_pass)
            try:
                self.jobs.release_lease(COORDINATOR_LEASE, self.agent_id)
                self.jobs.set_agent_state(self.agent_id, "stopped", "stopped gracefully")
            except SQLAlchemyError as exc:
                log.warning("agent %s: could not record its stop: %s", self.agent_id, exc)
            log.info("agent %s stopped", self.agent_id)
        if failed:
            raise failed[0]
        return 0

    def install_signal_handlers(self) -> None:
        self.owns_process = True
        self.worker.install_signal_handlers(self.deadline)

    def _control_loop(self) -> None:
        interval = self.settings.agent_heartbeat_interval_s
        while not self.stopping.is_set() and not self.worker.stop_event.is_set():
            try:
                self.tick()
            except SQLAlchemyError as exc:  # the store is away: keep running, fences fail closed
                log.warning("agent %s: control store unavailable: %s", self.agent_id, exc)
            except Exception:
                log.exception("agent %s: control tick failed", self.agent_id)
            self.stopping.wait(interval)

    def _spot_loop(self) -> None:
        imds = InstanceMetadata(self.settings.spot_imds_url or "")
        seen: set[Notice] = set()
        while not self.stopping.is_set() and not self.worker.stop_event.is_set():
            for notice in imds.poll():
                if notice in seen:
                    continue
                seen.add(notice)
                try:
                    self.on_notice(notice)
                except SQLAlchemyError as exc:
                    seen.discard(notice)  # act on it at the next poll
                    log.warning("agent %s: cannot act on %s: %s", self.agent_id, notice, exc)
            self.stopping.wait(self.settings.spot_poll_interval_s)

    def on_notice(self, notice: Notice) -> None:
        """An interruption evacuates this agent; a rebalance recommendation is recorded."""
        if notice.kind == "interruption":
            self.evacuate(f"spot interruption notice: {notice.action} at {notice.time}")
        else:
            log.warning("agent %s: rebalance recommended at %s", self.agent_id, notice.time)
            self.jobs.note(None, self.agent_id, None, "Rebalance", f"recommended at {notice.time}")

    def evacuate(self, reason: str) -> list[str]:
        """Drain at once: take no new task, stop every task at a checkpoint and release it to
        the others now (not one hand-off per coordinator pass). The tasks it stopped."""
        log.warning("agent %s evacuates: %s", self.agent_id, reason)
        self.jobs.set_agent_state(self.agent_id, "draining", reason)
        stopped = []
        with self.lock:
            for task in self.worker.running():
                name = str(task)
                if name not in self.handing_off:
                    self.handing_off.add(name)
                    self.worker.stop_task(task, checkpoint=True, reason=reason)
                    stopped.append(name)
        return stopped

    def tick(self) -> list[str]:
        """Heartbeat, coordinate if leader, run what the job model says; what the coordinator did.

        A draining agent (an operator's drain, a spot notice) does not take the coordinator
        lease: it is about to go, and a survivor should not wait for its lease to expire."""
        state = self.jobs.heartbeat(self.agent_id)
        if state is None:  # an operator removed our row
            self.jobs.register_agent(self.agent_id, socket.gethostname(), os.getpid(), self.topic)
            state = "running"
        changes: list[str] = []
        ttl = self.settings.agent_loss_after_s
        leader = state == "running" and self.jobs.acquire_lease(
            COORDINATOR_LEASE, self.agent_id, ttl
        )
        if leader:
            changes = self.coordinator.reconcile(term=int(leader))
        elif state != "running":
            self.jobs.release_lease(COORDINATOR_LEASE, self.agent_id)
        self.publisher.tick(leader)
        self.reload_views()
        self.sync()
        return changes

    def reload_views(self) -> bool:
        """If the views in force changed, load them and restart every task at a checkpoint."""
        now = time.monotonic()
        if now < self.next_view_check:
            return False
        self.next_view_check = now + VIEW_CHECK_S
        try:
            views, version = self.runtime.running_views(self.views_file)
            if version == self.view_version:
                self.refused = None
                return False
            before = declared_types(self.views)
            check_types(before, declared_types(views), "the views this agent runs")
        except ViewDefinitionError as exc:
            self._refuse(str(exc))
            return False
        self.refused = None
        self.views, self.view_version = views, version
        self.runtime.mark_deployed_running()
        log.info("agent %s: the views in force changed; restarting its tasks", self.agent_id)
        with self.lock:
            running = self.worker.running()
            for task in running:
                self.reloading.add(str(task))
                self.worker.stop_task(task, checkpoint=True, reason="the views changed")
            # a start still queued in the worker runs the views it was given: the old ones
            self.stale_starts |= set(self.requested) - {str(task) for task in running}
        return True

    def _refuse(self, reason: str) -> None:
        if reason != self.refused:
            log.error(
                "agent %s: the new views in force are refused; it keeps running the old ones: %s",
                self.agent_id,
                reason,
            )
        self.refused = reason

    # --- following the job model ---------------------------------------------------------

    def sync(self) -> None:
        mine = {a.task: a for a in self.jobs.assignments_of(self.agent_id)}
        running = {str(t): g for t, g in self.worker.running().items()}
        with self.lock:
            for name, generation in running.items():
                a = mine.get(name)
                task = TaskId.parse(name)
                if (
                    a is None
                    or a.generation != generation
                    or a.state not in ("Scheduled", "Running")
                ):
                    owner = "nobody" if a is None else f"{a.agent_id} (generation {a.generation})"
                    self.worker.stop_task(task, checkpoint=False, reason=f"now owned by {owner}")
                elif a.handoff_to and name not in self.handing_off:
                    self.handing_off.add(name)
                    self.worker.stop_task(
                        task, checkpoint=True, reason=f"hand-off to {a.handoff_to}"
                    )
            for name, a in mine.items():
                if a.state not in ("Scheduled", "Running") or name in running:
                    continue
                if (
                    self.requested.get(name) == a.generation
                    or name in self.handing_off
                    or name in self.reloading
                ):
                    continue
                disabled = self.jobs.disabled_views(name)
                views = [v for v in self.views if v.name not in disabled]
                crashes = self.runtime.control.crashes.of_task(name)
                self.requested[name] = a.generation
                self.worker.start_task(
                    TaskId.parse(name),
                    a.generation,
                    views,
                    self._fence(name, a.generation),
                    crashes,
                )

    def _fence(self, task: str, generation: int):
        def owns() -> bool:
            try:
                return self.jobs.owns(self.agent_id, task, generation)
            except SQLAlchemyError as exc:  # cannot tell: do not write (fail closed)
                log.warning("%s: fence check failed, not writing: %s", task, exc)
                return False

        return owns

    def _on_event(self, event: TaskEvent) -> None:
        """From the worker thread: record what became of a task in the job model."""
        name = str(event.task)
        if event.kind == "crashed":  # logged before the task may be started again: the
            # worker keeps it in running() until this returns, so sync() cannot start it yet
            self._record_crash(event)
        with self.lock:
            self.requested.pop(name, None)
            handed_off = name in self.handing_off
            self.handing_off.discard(name)
            reloaded = name in self.reloading
            self.reloading.discard(name)
            stale = name in self.stale_starts
            self.stale_starts.discard(name)
        try:
            if event.kind == "started":
                if not self.jobs.mark_running(
                    name, self.agent_id, event.generation, f"restored {event.detail}"
                ):
                    self.worker.stop_task(event.task, checkpoint=False, reason="moved meanwhile")
                elif stale and not self.worker.stop_event.is_set():
                    with self.lock:
                        self.reloading.add(name)
                    self.worker.stop_task(
                        event.task, checkpoint=True, reason="the views changed as it started"
                    )
            elif (
                event.kind == "stopped"
                and reloaded
                and not handed_off  # a hand-off stopped it first: it goes to its new owner
                and not self.worker.stop_event.is_set()
            ):
                pass  # still ours: the next sync starts it again with the new views
            elif event.kind == "stopped":
                reason = event.detail if handed_off else f"agent {self.agent_id} stopped"
                self.jobs.release(name, self.agent_id, event.generation, reason)
            elif event.kind == "fenced":
                self.jobs.note(name, self.agent_id, event.generation, "Fenced", event.detail)
        except SQLAlchemyError as exc:
            log.warning(
                "agent %s: cannot record %s of %s: %s", self.agent_id, event.kind, name, exc
            )

    def _record_crash(self, event: TaskEvent) -> None:
        """Keep a crash in the crash log (the task's next start isolates its offsets), note a
        quarantine, and apply Mist's rule to the view that crashed. Never raises: a crash must
        not stop the worker thread."""
        name = str(event.task)
        first = event.first_offset if event.first_offset is not None else -1
        crash = TaskCrash(
            name,
            first,
            event.end_offset if event.end_offset is not None else first,
            event.error or event.detail,
            event.view,
            event.record_ts,
            self.agent_id,
            event.generation,
        )
        settings = self.settings
        try:
            crashes = self.runtime.control.crashes
            crashes.record(crash)
            if crash.single and crash_plan(crashes.of_task(name)).quarantined.get(first):
                self.jobs.note(
                    name,
                    self.agent_id,
                    event.generation,
                    "Quarantined",
                    f"offset {first}: " + crash.detail(),
                )
            if event.view is None:
                where = f"offsets [{crash.first_offset}, {crash.end_offset})"
                self.jobs.note(
                    name, self.agent_id, event.generation, "Crashed", f"{where}: {crash.error}"
                )
                return
            verdict = crashes.verdict(name, event.view, settings.view_crash_window_s)
            if self.jobs.record_view_crash(
                name,
                event.view,
                event.detail,
                settings.view_crash_limit,
                settings.view_crash_window_s,
                counted=verdict.counted,
                at_fault=verdict.quarantines > settings.view_crash_limit,
            ):
                log.error("%s: view %s disabled on this task: %s", name, event.view, event.detail)
        except SQLAlchemyError as exc:
            log.warning("agent %s: cannot record the crash of %s: %s", self.agent_id, name, exc)
        except Exception:
            log.exception("agent %s: recording the crash of %s failed", self.agent_id, name)
