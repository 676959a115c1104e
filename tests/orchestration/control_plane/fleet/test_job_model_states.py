"""A model-checked coordinator: random faults against the real scheduling and job-model code.

A hypothesis state machine drives :class:`Coordinator` (with a :class:`Rebucketer` over a real
object store) and :class:`JobModelStore` on SQLite and on PostgreSQL. Its simulated agents do
what ``Agent.sync`` and ``Agent._on_event`` do, through the same job-model calls: start what is
Scheduled on them (``mark_running``), stop at a checkpoint and ``release`` what is handed off
(when their hand-off completes), drop what moved to a newer generation, ``register_agent``
again when restarted with the same id. Supervisors mark lost agents (``set_agent_state``), so
no step depends on the clock; a lease move is a new :class:`Coordinator` with no memory.

After every step: the tasks of each partition cover its key-hash space exactly once (bucket
``b`` of factor ``F`` holds the hashes ``h`` with ``h mod F == b``), each owned by at most one
agent that the model knows. When the faults stop, every task runs again within a bounded
number of coordinator passes (liveness), which is how a merge left stranded shows.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import text

from orchestration.control_plane.fleet.coordinator import Coordinator
from orchestration.control_plane.fleet.rebucketing import Rebucketer
from pipelines.control import ControlStore
from pipelines.storage import LocalObjectStore
from pipelines.stream import TaskId

TOPIC = "events"
PARTITIONS = [0]
MAX_FACTOR = 4
AGENT_IDS = [f"a{i}" for i in range(5)]
LIVENESS_PASSES = 30
"""Coordinator passes (each followed by every live agent's sync) within which every task must
be Running once the faults stop."""
EXAMPLES = "SLUICE_MODEL_EXAMPLES"
"""Set it to search longer than the default (e.g. 2000 before a release)."""
TABLES = ("agents", "task_assignments", "job_events", "leases", "task_status")


class _Crash(Exception):
    """The coordinator process dies here."""


@dataclass
class SimAgent:
    """What an agent process holds in memory: the tasks its worker runs (task -> generation)
    and those it is stopping at a checkpoint for a hand-off."""

    running: dict[str, int] = field(default_factory=dict)
    stopping: set[str] = field(default_factory=set)
    alive: bool = True


class JobModelMachine(RuleBasedStateMachine):
    control: ControlStore
    storage_root: Path

    def __init__(self) -> None:
        super().__init__()
        with self.control.engine.begin() as conn:
            for table in TABLES:
                conn.execute(text(f"DELETE FROM {table}"))
        self.store = LocalObjectStore(Path(tempfile.mkdtemp(dir=self.storage_root)))
        self.jobs = self.control.jobs
        self.agents: dict[str, SimAgent] = {}
        self.coordinator = self._new_coordinator()
        self.leaders = 0

    def _new_coordinator(self, waiting_max_s: float = 3600.0) -> Coordinator:
        rebucketer = Rebucketer(
            self.control, self.store, TOPIC, lambda: [], MAX_FACTOR, "org", merge_delay_s=0.0
        )
        return Coordinator(
            self.jobs, TOPIC, lambda: PARTITIONS, 3600.0, None, rebucketer, waiting_max_s
        )

    # --- agents ---------------------------------------------------------------------------

    def _register(self, agent_id: str) -> None:
        self.jobs.register_agent(agent_id, "host", 1, TOPIC)
        self.agents[agent_id] = SimAgent()

    def _sync(self, agent_id: str, finish_handoffs: bool) -> None:
        """``Agent.sync`` and the worker's events, as one step of one agent."""
        agent = self.agents[agent_id]
        mine = {a.task: a for a in self.jobs.assignments_of(agent_id)}
        for name, generation in list(agent.running.items()):
            a = mine.get(name)
            if a is None or a.generation != generation or a.state not in ("Scheduled", "Running"):
                del agent.running[name]  # moved on: dropped without writing
                agent.stopping.discard(name)
            elif a.handoff_to:
                agent.stopping.add(name)
        if finish_handoffs:
            for name in sorted(agent.stopping):
                generation = agent.running.pop(name)
                self.jobs.release(name, agent_id, generation, "hand-off done")
            agent.stopping.clear()
        for name, a in mine.items():
            if (
                a.state == "Scheduled"
                and name not in agent.running
                and self.jobs.mark_running(name, agent_id, a.generation, "restored")
            ):
                agent.running[name] = a.generation

    @initialize(n=st.integers(1, 3))
    def first_agents(self, n: int) -> None:
        for agent_id in AGENT_IDS[:n]:
            self._register(agent_id)

    @precondition(lambda self: len(self.agents) < len(AGENT_IDS))
    @rule()
    def agent_joins(self) -> None:
        self._register(next(a for a in AGENT_IDS if a not in self.agents))

    @rule(data=st.data(), finish=st.booleans())
    def agent_syncs(self, data: st.DataObject, finish: bool) -> None:
        alive = sorted(a for a, s in self.agents.items() if s.alive)
        if alive:
            self._sync(data.draw(st.sampled_from(alive)), finish)

    @rule(data=st.data())
    def agent_leaves(self, data: st.DataObject) -> None:
        """SIGTERM: every task stops at a checkpoint and is released, then the agent stops."""
        alive = sorted(a for a, s in self.agents.items() if s.alive)
        if not alive:
            return
        agent_id = data.draw(st.sampled_from(alive))
        agent = self.agents[agent_id]
        for name, generation in sorted(agent.running.items()):
            self.jobs.release(name, agent_id, generation, f"agent {agent_id} stopped")
        self.jobs.set_agent_state(agent_id, "stopped", "stopped gracefully")
        self.agents[agent_id] = SimAgent(alive=False)

    @rule(data=st.data())
    def agent_is_lost(self, data: st.DataObject) -> None:
        """SIGKILL, seen by a supervisor: the process and what it held in memory are gone."""
        if not self.agents:
            return
        agent_id = data.draw(st.sampled_from(sorted(self.agents)))
        self.jobs.set_agent_state(agent_id, "lost", "exited with -9")
        self.agents[agent_id] = SimAgent(alive=False)

    @rule(data=st.data())
    def agent_restarts(self, data: st.DataObject) -> None:
        """The same id starts again (a supervisor's restart, or a crash loop)."""
        if self.agents:
            self._register(data.draw(st.sampled_from(sorted(self.agents))))

    @rule(data=st.data())
    def agent_drains(self, data: st.DataObject) -> None:
        alive = sorted(a for a, s in self.agents.items() if s.alive)
        if alive:
            self.jobs.set_agent_state(data.draw(st.sampled_from(alive)), "draining", "drain")

    # --- the coordinator -------------------------------------------------------------------

    @rule()
    def coordinator_pass(self) -> None:
        self.coordinator.reconcile()

    @rule()
    def fleet_tick(self) -> None:
        """A coordinator pass, then every live agent's sync with its hand-offs done."""
        self.coordinator.reconcile()
        for agent_id in sorted(a for a, s in self.agents.items() if s.alive):
            self._sync(agent_id, finish_handoffs=True)

    @rule(impatient=st.booleans())
    def lease_moves(self, impatient: bool) -> None:
        """Another agent takes the lease: a coordinator with nothing in memory (impatient:
        every Waiting task is past its watchdog limit, as if a minute went by)."""
        self.coordinator = self._new_coordinator(0.0 if impatient else 3600.0)

    @rule(after_replacement=st.booleans())
    def coordinator_dies_mid_step(self, after_replacement: bool) -> None:
        """The leader dies in a split or merge: after the storage rewrite and before the rows
        are replaced, or after the rows are replaced and before the checkpoints are deleted."""
        replace = self.jobs.replace_tasks

        def dies(*args, **kwargs):
            if after_replacement:
                replace(*args, **kwargs)
            raise _Crash()

        self.jobs.replace_tasks = dies  # type: ignore[method-assign]
        try:
            self.coordinator.reconcile()
        except _Crash:
            pass
        finally:
            del self.jobs.replace_tasks
        self.coordinator = self._new_coordinator()

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def every_key_bucket_has_exactly_one_task(self) -> None:
        tasks = self.jobs.assignments(TOPIC)
        for partition in PARTITIONS:
            ids = [TaskId.parse(a.task) for a in tasks if a.partition == partition]
            if not ids:
                continue  # before the first coordinator pass
            for h in range(MAX_FACTOR):
                owners = [str(t) for t in ids if h % t.factor == t.bucket]
                assert len(owners) == 1, f"hash {h} of partition {partition}: {owners}"

    @invariant()
    def every_owner_is_a_known_agent(self) -> None:
        known = {a.agent_id for a in self.jobs.agents()}
        rows = {a.task: a for a in self.jobs.assignments(TOPIC)}
        for a in rows.values():
            if a.state in ("Scheduled", "Running"):
                assert a.agent_id in known, a
            else:
                assert a.agent_id is None, a
        for name, a in rows.items():
            holders = [
                agent_id
                for agent_id, agent in self.agents.items()
                if agent.running.get(name) == a.generation
                and self.jobs.owns(agent_id, name, a.generation)
            ]
            assert len(holders) <= 1, f"{name} owned by {holders}"

    def teardown(self) -> None:
        """The faults stop: a running agent at least, every agent alive, and the agents and
        the coordinator do their normal passes; every task must run again."""
        if not any(s.alive for s in self.agents.values()) or not any(
            a.state == "running" for a in self.jobs.agents()
        ):
            self._register(next((a for a in AGENT_IDS if a not in self.agents), "a0"))
        for agent_id, agent in list(self.agents.items()):
            if not agent.alive:
                self._register(agent_id)
        for _ in range(LIVENESS_PASSES):
            self.coordinator.reconcile()
            for agent_id in sorted(self.agents):
                self._sync(agent_id, finish_handoffs=True)
            tasks = self.jobs.assignments(TOPIC)
            if tasks and all(a.state == "Running" and not a.handoff_to for a in tasks):
                return
        stuck = [
            f"{a.task} {a.state} handoff_to={a.handoff_to} ({a.reason})"
            for a in self.jobs.assignments(TOPIC)
            if a.state != "Running" or a.handoff_to
        ]
        raise AssertionError(f"not every task Running after {LIVENESS_PASSES} passes: {stuck}")


def test_the_job_model_keeps_every_bucket_owned_and_every_task_running(control_url, tmp_path):
    control = ControlStore(control_url)
    (tmp_path / "storage").mkdir()

    class Machine(JobModelMachine):
        pass

    Machine.control = control
    Machine.storage_root = tmp_path / "storage"
    try:
        run_state_machine_as_test(
            Machine,
            settings=settings(
                max_examples=int(os.environ.get(EXAMPLES, "60")),
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    finally:
        control.engine.dispose()
