"""A paused former leader's merge rewrite is refused by the fencing token (the lease term).

A real process runs a merge's storage rewrite under term 1 and waits at a barrier just before
the conditional write that would make it visible. It is SIGSTOPped; a coordinator that took
the lease (term 2) redoes the merge, and the merged task runs on and flushes. SIGCONT and the
barrier's release: the old rewrite is refused (its exit status and output say so) and every
reader sees the new leader's result, unchanged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestration.control_plane.fleet.coordinator import Coordinator
from orchestration.control_plane.fleet.rebucketing import Rebucketer
from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.control import ControlStore
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import fence
from pipelines.storage import LocalObjectStore
from pipelines.stream import TaskId
from pipelines.stream.checkpoint import load_checkpoint
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters, Record
from pipelines.views import load_views
from tests.fixtures.tables import query_realtime

TOPIC = "events"
LOW, HIGH, WHOLE = "events:0#0/2", "events:0#1/2", "events:0"
NAMES = ("traffic_by_org", "transfers_last_hour")
REFUSED = 3

OLD_LEADER = """
import os, sys, time
from pathlib import Path
from pipelines.config import PROJECT_ROOT
from pipelines.segments import RewriteFenced
from pipelines.segments import fence
from pipelines.storage import LocalObjectStore
from pipelines.stream import TaskId
from pipelines.stream.rebucket import merge_tasks
from pipelines.views import load_views

root, barrier, low, high = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
names = sys.argv[5].split(",")


class AtTheBarrier(LocalObjectStore):
    def put_if(self, key, data, version):
        if not (barrier / "ready").exists():
            (barrier / "ready").write_text(key)
            deadline = time.monotonic() + 120.0
            while not (barrier / "release").exists():
                if time.monotonic() > deadline:
                    print("never released", flush=True)
                    sys.exit(4)
                time.sleep(0.01)
        return super().put_if(key, data, version)


views = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if v.name in names]
try:
    merge_tasks(AtTheBarrier(root), views, TaskId.parse(low), TaskId.parse(high), term=1)
except RewriteFenced as exc:
    print(f"refused: {exc}", flush=True)
    sys.exit(3)  # REFUSED
print("merged under term 1", flush=True)
"""


def _records(n: int) -> list[Record]:
    options = GeneratorOptions(seed=9, max_events=n, peak_rate=20_000, speedup=60)
    return [
        Record(i, 1_000 + i, m.key, m.value)
        for i, m in enumerate(synthesize(load_trace("nyc_taxi"), options))
    ]


RECORDS = _records(3_000)
VIEWS = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if v.name in NAMES]


def _leader(control: ControlStore, store: LocalObjectStore) -> Coordinator:
    """A coordinator that just took the lease: nothing in memory."""
    rebucketer = Rebucketer(control, store, TOPIC, lambda: VIEWS, 4, "org", merge_delay_s=0.0)
    return Coordinator(control.jobs, TOPIC, lambda: [0], 3600.0, None, rebucketer)


def _agents_follow(control: ControlStore) -> None:
    """The agents' next sync: start what is Scheduled, stop at a checkpoint what is handed off."""
    for a in control.jobs.assignments(TOPIC):
        if a.state == "Scheduled":
            assert control.jobs.mark_running(a.task, a.agent_id, a.generation, "restored")
        elif a.state == "Running" and a.handoff_to:
            assert control.jobs.release(a.task, a.agent_id, a.generation, "stopped")


def _run(store: LocalObjectStore, tmp_path: Path, name: str, records: list[Record]) -> None:
    """The task ``name`` restores its checkpoint (or starts at 0), reads ``records``, checkpoints."""
    task_id = TaskId.parse(name)
    settings = SluiceSettings(state_dir=tmp_path / "state")
    task = StreamTask(
        TOPIC, 0, VIEWS, store, CollectingDeadLetters(), settings, 0, None, *task_id.where
    )
    if task.restore() is None:
        task.start_at(0)
    task.process([r for r in records if r.offset >= task.next_offset])
    task.checkpoint()


def _served(store: LocalObjectStore) -> dict[str, list[dict]]:
    return {v.name: query_realtime(store, v).to_pylist() for v in VIEWS}


def _wait_for(what: str, done, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert proc.poll() is None, f"the old leader exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        time.sleep(0.02)


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "T"


def _merge_asked(control_url: str, tmp_path: Path):
    """Two halves of partition 0 that read records, then both stopped for a merge, by a
    coordinator under term 1."""
    control = ControlStore(control_url)
    store = LocalObjectStore(tmp_path / "storage")
    for agent in ("a0", "a1"):
        control.jobs.register_agent(agent, "host", 1, TOPIC)
    old = _leader(control, store)
    for _ in range(6):  # two agents, one partition: split in two under term 1
        old.reconcile(term=1)
        _agents_follow(control)
    assert {a.task for a in control.jobs.assignments(TOPIC)} == {LOW, HIGH}
    for half in (LOW, HIGH):
        _run(store, tmp_path, half, RECORDS[:2_000])
    control.jobs.set_agent_state("a1", "draining", "drain")  # one agent: merge
    old.reconcile(term=1)
    _agents_follow(control)
    rows = control.jobs.assignments(TOPIC)
    assert {(a.task, a.state, a.handoff_to) for a in rows} == {
        (LOW, "Waiting", "@merge"),
        (HIGH, "Waiting", "@merge"),
    }
    return control, store, old


def test_a_paused_former_leaders_merge_rewrite_is_refused(control_url, tmp_path):
    control, store, _ = _merge_asked(control_url, tmp_path)
    halves = _served(store)

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    log = (tmp_path / "old-leader.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-c", OLD_LEADER, store.root, str(barrier), LOW, HIGH, ",".join(NAMES)],
        cwd=PROJECT_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for("the barrier", (barrier / "ready").exists, proc)
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_for("the stop", lambda: _stopped(proc.pid), proc)

        done = _leader(control, store).reconcile(term=2)  # the new leader redoes the merge
        assert any("merged into" in d for d in done), done
        _agents_follow(control)
        assert [(a.task, a.state) for a in control.jobs.assignments(TOPIC)] == [(WHOLE, "Running")]
        assert _served(store) == halves  # the merge moved the rows, it changed none
        _run(store, tmp_path, WHOLE, RECORDS)  # the merged task runs on and flushes
        after = _served(store)
        assert after != halves
        files = sorted(store.list("segments/"))
        checkpoint = load_checkpoint(store, TOPIC, 0)
        assert checkpoint is not None and checkpoint.next_offset == len(RECORDS)

        os.kill(proc.pid, signal.SIGCONT)
        (barrier / "release").write_text("go")
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)
    log.seek(0)
    output = log.read()
    log.close()
    assert proc.returncode == REFUSED, output
    assert "term 1 refused: term 2 wrote after it" in output, output
    assert _served(store) == after  # the readers see the new leader's result only
    assert sorted(store.list("segments/")) == files
    assert load_checkpoint(store, TOPIC, 0).next_offset == len(RECORDS)
    assert [k for k in store.list("rewrites/") if not k.endswith(".json")] == []  # no staged


def test_a_fenced_coordinator_leaves_the_step_to_the_newer_term(control_url, tmp_path, caplog):
    """A coordinator whose term a newer one fenced logs the refusal, does nothing to the step
    and does not try it again; the newer one finishes it."""
    control, store, old = _merge_asked(control_url, tmp_path)
    halves = _served(store)
    fence(store, NAMES, 2)  # the new leader's first pass, before it does the step
    assert old.reconcile(term=1) == []
    assert "term 1 refused: term 2 wrote after it" in caplog.text
    assert old.reconcile(term=1) == []  # not tried again under the old term
    rows = control.jobs.assignments(TOPIC)
    assert {(a.task, a.state, a.handoff_to) for a in rows} == {
        (LOW, "Waiting", "@merge"),
        (HIGH, "Waiting", "@merge"),
    }
    assert _served(store) == halves
    done = _leader(control, store).reconcile(term=2)
    assert any("merged into" in d for d in done), done
    assert _served(store) == halves
