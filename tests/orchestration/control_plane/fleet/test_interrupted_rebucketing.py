"""Every split or merge finishes or rolls back, on both control-store backends.

The stranded merge: a merge asked two buckets to stop; one stopped (Waiting ``@merge``), the
other's agent restarted, and its half went back to Running elsewhere. Six tasks then waited
for ever. Now the coordinator that holds the lease next (with nothing in memory) cancels the
lone half, a merge whose halves both stopped always completes, and the watchdog cancels a
merge whose other half never stops."""

from __future__ import annotations

from sqlalchemy import update

from orchestration.control_plane.fleet.coordinator import Coordinator
from orchestration.control_plane.fleet.rebucketing import Rebucketer
from pipelines.control import ControlStore, TaskStatus
from pipelines.control.jobs import task_assignments
from pipelines.storage import LocalObjectStore
from pipelines.stream import TaskId
from pipelines.stream.checkpoint import TaskCheckpoint, load_checkpoint, save_checkpoint

TOPIC = "events"
LOW, HIGH = "events:0#0/2", "events:0#1/2"


def _leader(control: ControlStore, store: LocalObjectStore, waiting_max_s: float = 60.0):
    """A coordinator that just took the lease: nothing in memory."""
    rebucketer = Rebucketer(control, store, TOPIC, lambda: [], 4, "org", merge_delay_s=0.0)
    return Coordinator(control.jobs, TOPIC, lambda: [0], 3600.0, None, rebucketer, waiting_max_s)


def _agents_follow(control: ControlStore, stop: set[str] | None = None) -> None:
    """The agents' next sync: start what is Scheduled; stop at a checkpoint (release) what is
    handed off, if its owner is in ``stop`` (None: every owner)."""
    for a in control.jobs.assignments(TOPIC):
        if a.state == "Scheduled":
            assert control.jobs.mark_running(a.task, a.agent_id, a.generation, "restored")
        elif a.state == "Running" and a.handoff_to and (stop is None or a.agent_id in stop):
            assert control.jobs.release(a.task, a.agent_id, a.generation, "stopped")


def _two_halves(control_url, tmp_path):
    """Agents a0 and a1 each running one half of partition 0 (one partition, two agents: the
    coordinator splits it in two)."""
    control = ControlStore(control_url)
    store = LocalObjectStore(tmp_path / "storage")
    for agent in ("a0", "a1"):
        control.jobs.register_agent(agent, "host", 1, TOPIC)
    coordinator = _leader(control, store)
    for _ in range(6):
        coordinator.reconcile()
        _agents_follow(control)
    rows = {a.task: a for a in control.jobs.assignments(TOPIC)}
    assert set(rows) == {LOW, HIGH}
    assert {a.agent_id for a in rows.values()} == {"a0", "a1"}
    assert all(a.state == "Running" and not a.handoff_to for a in rows.values())
    return control, store, coordinator


def _ask_for_a_merge(control: ControlStore, coordinator: Coordinator) -> dict:
    """a1 drains: one running agent calls for one bucket, so both halves are asked to stop."""
    control.jobs.set_agent_state("a1", "draining", "drain")
    coordinator.reconcile()
    rows = {a.task: a for a in control.jobs.assignments(TOPIC)}
    assert {a.handoff_to for a in rows.values()} == {"@merge"}
    return rows


def _settle(control: ControlStore, store: LocalObjectStore, passes: int = 8) -> list[str]:
    """New leaders, one per pass, each with nothing in memory; the tasks at the end."""
    for _ in range(passes):
        _leader(control, store).reconcile()
        _agents_follow(control)
    tasks = control.jobs.assignments(TOPIC)
    assert all(a.state == "Running" and not a.handoff_to for a in tasks), tasks
    return sorted(a.task for a in tasks)


def test_the_stranded_merge_is_cancelled_by_the_next_leader(control_url, tmp_path):
    """The stranded merge's sequence: one half stops for the merge, the other's agent
    restarts."""
    control, store, coordinator = _two_halves(control_url, tmp_path)
    rows = _ask_for_a_merge(control, coordinator)
    owner = {a.agent_id: a.task for a in rows.values()}
    _agents_follow(control, stop={"a0"})  # a0's half stops at a checkpoint
    assert control.jobs.assignments_of("a0") == []
    control.jobs.register_agent("a1", "host", 2, TOPIC)  # a1 restarted: its half is released
    rows = {a.task: a for a in control.jobs.assignments(TOPIC)}
    assert rows[owner["a0"]].handoff_to == "@merge" and rows[owner["a1"]].handoff_to is None
    # the lease moves: the new leader cancels the lone half from the control store alone
    done = _leader(control, store).reconcile()
    assert any("merge of" in d and "cancelled" in d for d in done), done
    cancelled = [e for e in control.jobs.events(owner["a0"]) if e.state == "Cancelled"]
    assert len(cancelled) == 1 and "is not stopping for it" in cancelled[0].reason
    # two running agents call for two buckets: both halves run again, nothing merged
    assert _settle(control, store) == [LOW, HIGH]
    # one agent left: the merge starts again and completes
    control.jobs.set_agent_state("a1", "stopped", "scaled in")
    assert _settle(control, store) == ["events:0"]


def test_a_merge_whose_other_half_was_lost_is_cancelled_then_done(control_url, tmp_path):
    control, store, coordinator = _two_halves(control_url, tmp_path)
    rows = _ask_for_a_merge(control, coordinator)
    owner = {a.agent_id: a.task for a in rows.values()}
    _agents_follow(control, stop={"a1"})  # a1's half stops for the merge
    control.jobs.set_agent_state("a0", "lost", "exited with -9")  # a supervisor saw a0 die
    control.jobs.set_agent_state("a1", "running", "resumed")
    coordinator.reconcile()  # a0's half goes back to Waiting without its mark, then to a1
    coordinator.reconcile()  # a1's half is alone: its merge is cancelled
    cancelled = [e for e in control.jobs.events(owner["a1"]) if e.state == "Cancelled"]
    assert len(cancelled) == 1 and "is not stopping for it" in cancelled[0].reason
    # a1 alone calls for one bucket: the merge is asked again, and done
    assert _settle(control, store) == ["events:0"]


def test_a_merge_whose_halves_stopped_completes_after_the_leader_dies_mid_step(
    control_url, tmp_path
):
    """The leader dies after the storage rewrite, before the rows are replaced: the next one
    does the step again (the rewrite is deterministic) and never cancels it."""
    control, store, coordinator = _two_halves(control_url, tmp_path)
    for i, task in enumerate((LOW, HIGH)):
        t = TaskId.parse(task)
        save_checkpoint(
            store,
            TaskCheckpoint(TOPIC, 0, 100 + i, 0, 50, {}, generation=1, bucket=t.bucket, factor=2),
        )
    _ask_for_a_merge(control, coordinator)
    _agents_follow(control)  # both halves stopped
    jobs = control.jobs

    def dies(*args, **kwargs):
        raise SystemExit("the leader dies")

    jobs.replace_tasks = dies  # type: ignore[method-assign]
    try:
        coordinator.reconcile()
    except SystemExit:
        pass
    finally:
        del jobs.replace_tasks
    merged = load_checkpoint(store, TOPIC, 0)
    assert merged is not None and merged.next_offset == 100  # the rewrite ran
    rows = control.jobs.assignments(TOPIC)
    assert {a.handoff_to for a in rows} == {"@merge"} and {a.state for a in rows} == {"Waiting"}
    with control.engine.begin() as conn:  # long past the watchdog's limit: still not cancelled
        conn.execute(update(task_assignments).values(since=task_assignments.c.since - 3600))
    assert _settle(control, store) == ["events:0"]
    assert not [e for e in jobs.events(limit=500) if e.state == "Cancelled"]
    assert load_checkpoint(store, TOPIC, 0, 0, 2) is None  # the halves' checkpoints are gone
    assert load_checkpoint(store, TOPIC, 0).consumed == 100


def test_a_merge_refused_by_the_rewrite_is_cancelled(control_url, tmp_path):
    """Only one half has a checkpoint: merge_tasks refuses before writing anything."""
    control, store, coordinator = _two_halves(control_url, tmp_path)
    save_checkpoint(store, TaskCheckpoint(TOPIC, 0, 10, 0, 10, {}, generation=1, factor=2))
    _ask_for_a_merge(control, coordinator)
    _agents_follow(control)
    done = coordinator.reconcile()
    assert sum(": @merge of" in d and "no checkpoint" in d for d in done) == 2, done
    tasks = control.jobs.assignments(TOPIC)
    assert all(not a.handoff_to for a in tasks) and len(tasks) == 2
    assert load_checkpoint(store, TOPIC, 0) is None  # nothing was written
    coordinator.reconcile()  # and it is not tried again at once
    assert all(not a.handoff_to for a in control.jobs.assignments(TOPIC))


def test_the_watchdog_cancels_a_merge_whose_other_half_never_stops(control_url, tmp_path):
    control, _, coordinator = _two_halves(control_url, tmp_path)
    rows = _ask_for_a_merge(control, coordinator)
    owner = {a.agent_id: a.task for a in rows.values()}
    _agents_follow(control, stop={"a0"})  # a1 never stops its half (stuck, yet heartbeating)
    coordinator.reconcile()
    rows = {a.task: a for a in control.jobs.assignments(TOPIC)}
    assert rows[owner["a0"]].state == "Waiting" and rows[owner["a0"]].handoff_to == "@merge"
    with control.engine.begin() as conn:
        conn.execute(
            update(task_assignments)
            .where(task_assignments.c.task == owner["a0"])
            .values(since=task_assignments.c.since - 61)
        )
    done = coordinator.reconcile()
    assert sum(": watchdog:" in d for d in done) == 2, done
    rows = {a.task: a for a in control.jobs.assignments(TOPIC)}
    assert rows[owner["a0"]].state == "Scheduled" and rows[owner["a0"]].agent_id == "a0"
    assert rows[owner["a1"]].state == "Running" and rows[owner["a1"]].handoff_to is None
    reasons = [e.reason for e in control.jobs.events(owner["a0"]) if e.state == "Cancelled"]
    assert reasons and "SLUICE_TASK_WAITING_MAX_S" in reasons[0]
    _agents_follow(control)
    coordinator.reconcile()  # the same merge is not asked again at once
    assert "@merge" not in {a.handoff_to for a in control.jobs.assignments(TOPIC)}


def test_a_leader_dying_after_the_replacement_leaves_no_retired_task_behind(control_url, tmp_path):
    """The leader dies after replacing the rows, before deleting the halves' checkpoints and
    status rows: the next leader removes them (a status row left behind would be counted by
    status and by every sum over the tasks)."""
    control, store, coordinator = _two_halves(control_url, tmp_path)
    for i, task in enumerate((LOW, HIGH)):
        t = TaskId.parse(task)
        save_checkpoint(
            store,
            TaskCheckpoint(TOPIC, 0, 100 + i, 0, 50, {}, generation=1, bucket=t.bucket, factor=2),
        )
    control.report_tasks(
        [TaskStatus(task=t, topic=TOPIC, partition=0, worker_id="a0", pid=1) for t in (LOW, HIGH)]
    )
    _ask_for_a_merge(control, coordinator)
    _agents_follow(control)
    jobs = control.jobs
    replace = jobs.replace_tasks

    def dies_after(*args, **kwargs):
        replace(*args, **kwargs)
        raise SystemExit("the leader dies")

    jobs.replace_tasks = dies_after  # type: ignore[method-assign]
    try:
        coordinator.reconcile()
    except SystemExit:
        pass
    finally:
        del jobs.replace_tasks
    assert [a.task for a in jobs.assignments(TOPIC)] == ["events:0"]
    assert {t.task for t in control.tasks()} == {LOW, HIGH}  # left behind
    assert load_checkpoint(store, TOPIC, 0, 0, 2) is not None
    done = _leader(control, store).reconcile()
    assert sum("retired" in d for d in done) == 2, done
    assert not control.tasks()
    assert load_checkpoint(store, TOPIC, 0, 0, 2) is None
    assert load_checkpoint(store, TOPIC, 0, 1, 2) is None
    assert load_checkpoint(store, TOPIC, 0).consumed == 100  # the merged task's is kept
