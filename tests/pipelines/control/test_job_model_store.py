"""The job model's conditional writes, on SQLite and a real PostgreSQL server: generations
fence stale owners, leases elect one coordinator, crashes disable a view on one task only."""

from __future__ import annotations

import threading
import time

from pipelines.control import ControlStore, TaskStatus


def _store(url: str) -> ControlStore:
    return ControlStore(url)


def test_generations_fence_a_stale_owner(control_url: str) -> None:
    store = _store(control_url)
    jobs = store.jobs
    try:
        assert jobs.ensure_tasks("events", [0, 1]) == ["events:0", "events:1"]
        assert jobs.ensure_tasks("events", [0, 1, 2]) == ["events:2"]
        gen = jobs.schedule("events:0", 0, "a1", "least loaded")
        assert gen == 1
        assert jobs.schedule("events:0", 0, "a2", "a second coordinator") is None  # moved already
        assert jobs.mark_running("events:0", "a1", 1, "restored at offset 0")
        assert jobs.owns("a1", "events:0", 1)
        # a1 is lost: the coordinator moves the task; a1 is fenced from then on
        assert jobs.unassign("events:0", 1, "a1", "agent a1 lost")
        assert jobs.schedule("events:0", 1, "a2", "least loaded") == 2
        assert not jobs.owns("a1", "events:0", 1)
        assert not jobs.mark_running("events:0", "a1", 1, "stale")
        assert not jobs.release("events:0", "a1", 1, "stale hand-off")
        assert jobs.owns("a2", "events:0", 2)
        (row,) = [a for a in jobs.assignments("events") if a.task == "events:0"]
        assert (row.agent_id, row.generation, row.state) == ("a2", 2, "Scheduled")
        states = [e.state for e in jobs.events("events:0")]
        assert states == ["Waiting", "Scheduled", "Running", "Waiting", "Scheduled"]
    finally:
        store.close()


def test_a_stale_generation_does_not_overwrite_task_metrics(control_url: str) -> None:
    store = _store(control_url)
    try:
        new = TaskStatus("events:0", "events", 0, "a2", 2, consumed=500, generation=3)
        store.report_tasks([new])
        stale = TaskStatus("events:0", "events", 0, "a1", 1, consumed=100, generation=2)
        store.report_tasks([stale])
        (row,) = store.tasks()
        assert (row.worker_id, row.consumed, row.generation) == ("a2", 500, 3)
        store.report_tasks(
            [TaskStatus("events:0", "events", 0, "a2", 2, consumed=600, generation=3)]
        )
        assert store.tasks()[0].consumed == 600
    finally:
        store.close()


def test_handoff_and_reregistration(control_url: str) -> None:
    store = _store(control_url)
    jobs = store.jobs
    try:
        jobs.register_agent("a1", "host1", 11, "events")
        jobs.ensure_tasks("events", [0, 1])
        jobs.schedule("events:0", 0, "a1", "x")
        jobs.mark_running("events:0", "a1", 1, "restored")
        assert not jobs.request_handoff("events:0", 0, "a2", "wrong generation")
        assert jobs.request_handoff("events:0", 1, "a2", "balance")
        (row,) = [a for a in jobs.assignments_of("a1")]
        assert row.handoff_to == "a2"
        assert jobs.release("events:0", "a1", 1, "handed off to a2")
        (row,) = [a for a in jobs.assignments() if a.task == "events:0"]
        assert (row.state, row.agent_id, row.handoff_to) == ("Waiting", None, "a2")
        # a restarted agent owns nothing: what its id held goes back to Waiting
        jobs.schedule("events:1", 0, "a1", "x")
        assert jobs.register_agent("a1", "host1", 12, "events") == ["events:1"]
        assert all(a.state == "Waiting" for a in jobs.assignments())
        (agent,) = jobs.agents()
        assert (agent.pid, agent.state) == (12, "running")
        assert jobs.set_agent_state("a1", "draining", "operator")
        assert jobs.heartbeat("a1") == "draining"
        assert jobs.heartbeat("nobody") is None
    finally:
        store.close()


def test_one_lease_holder_and_terms(control_url: str) -> None:
    store = _store(control_url)
    jobs = store.jobs
    try:
        assert jobs.acquire_lease("coordinator", "a1", 0.5) == 1
        assert jobs.acquire_lease("coordinator", "a2", 0.5) is None
        assert jobs.acquire_lease("coordinator", "a1", 0.5) == 1  # renewal keeps the term
        deadline = time.monotonic() + 5
        while (term := jobs.acquire_lease("coordinator", "a2", 0.5)) is None:
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.05)
        assert term == 2
        assert jobs.acquire_lease("coordinator", "a1", 0.5) is None
        jobs.release_lease("coordinator", "a2")
        assert jobs.acquire_lease("coordinator", "a1", 5) == 3
    finally:
        store.close()


def test_concurrent_candidates_elect_exactly_one(control_url: str) -> None:
    stores = [_store(control_url) for _ in range(6)]
    winners: list[str] = []
    barrier = threading.Barrier(len(stores))

    def candidate(i: int) -> None:
        barrier.wait()
        if stores[i].jobs.acquire_lease("coordinator", f"a{i}", 30) is not None:
            winners.append(f"a{i}")

    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert len(winners) == 1, winners


def test_three_crashes_disable_a_view_on_that_task_only(control_url: str) -> None:
    store = _store(control_url)
    jobs = store.jobs
    try:
        assert not jobs.record_view_crash("events:0", "v1", "state unreadable")
        assert not jobs.record_view_crash("events:0", "v1", "state unreadable")
        assert not jobs.record_view_crash("events:1", "v1", "other task")
        assert jobs.record_view_crash("events:0", "v1", "state unreadable")
        assert jobs.disabled_views("events:0") == {"v1"}
        assert jobs.disabled_views("events:1") == set()
        (state,) = [s for s in jobs.view_states("events:0")]
        assert state.state == "Disabled" and "3 crashes" in state.reason
        assert jobs.enable_view("events:0", "v1", "operator re-enabled")
        assert jobs.disabled_views("events:0") == set()
        # crashes older than the window do not count
        assert not jobs.record_view_crash("events:2", "v1", "x", window_s=0.01)
        time.sleep(0.05)
        assert not jobs.record_view_crash("events:2", "v1", "x", window_s=0.01)
        assert not jobs.record_view_crash("events:2", "v1", "x", limit=3, window_s=0.01)
    finally:
        store.close()


def test_cancel_handoff_clears_a_mark_at_its_generation_only(control_url: str) -> None:
    store = _store(control_url)
    jobs = store.jobs
    try:
        jobs.ensure_tasks("events", [0])
        assert not jobs.cancel_handoff("events:0", 0, "no mark to cancel")
        gen = jobs.schedule("events:0", 0, "a1", "least loaded")
        assert jobs.mark_running("events:0", "a1", gen, "restored")
        assert jobs.request_handoff("events:0", gen, "a2", "balance")
        assert not jobs.cancel_handoff("events:0", gen, "a hand-off to an agent is no mark")
        jobs.set_task_state("events:0", "Waiting", "operator")
        gen = jobs.schedule("events:0", gen + 1, "a1", "again")
        assert jobs.mark_running("events:0", "a1", gen, "restored")
        assert jobs.request_handoff("events:0", gen, "@merge", "merge")
        assert jobs.release("events:0", "a1", gen, "stopped for the merge")
        assert not jobs.cancel_handoff("events:0", gen - 1, "a stale generation")
        assert jobs.cancel_handoff("events:0", gen, "its partner went back to Running")
        (row,) = jobs.assignments("events")
        assert (row.state, row.handoff_to, row.generation) == ("Waiting", None, gen)
        assert row.reason == "its partner went back to Running"
        last = jobs.events("events:0")[-1]
        assert (last.state, last.generation) == ("Cancelled", gen)
        assert not jobs.cancel_handoff("events:0", gen, "twice")
    finally:
        store.close()
