"""Burrow-style lag evaluation over a sliding window of samples."""

from __future__ import annotations

import pytest

from orchestration.control_plane.lag import LagSample, lag_status, worst


def _window(offsets, backlogs, age=1.0):
    return [
        LagSample(float(i), o, b, age)
        for i, (o, b) in enumerate(zip(offsets, backlogs, strict=True))
    ]


@pytest.mark.parametrize(
    ("offsets", "backlogs", "age", "expected"),
    [
        ([10, 20, 30, 40], [5, 0, 3, 2], 1.0, "OK"),  # lag reached zero in the window
        ([10, 20, 30, 40], [50, 40, 60, 45], 1.0, "OK"),  # moving, lag not growing throughout
        ([10, 20, 30, 40], [50, 60, 70, 80], 1.0, "WARN"),  # moving, lag growing throughout
        ([10, 10, 10, 10], [50, 50, 60, 70], 1.0, "STALL"),  # not moving while lag > 0
        ([10, 20, 30, 40], [50, 60, 70, 80], 900.0, "STOP"),  # no reports for 15 minutes
        ([10, 20, 5, 40], [5, 5, 5, 5], 1.0, "ERR"),  # offset went backwards
    ],
)
def test_statuses(offsets, backlogs, age, expected):
    assert lag_status(_window(offsets, backlogs, age)) == expected


def test_fleet_status_is_the_worst_task():
    assert worst(["OK", "WARN", "OK"]) == "WARN"
    assert worst(["OK", "STALL", "WARN"]) == "STALL"
    assert worst([]) == "OK"


def test_status_summary_is_not_ok_while_a_task_is_stale(tmp_path, monkeypatch, capsys) -> None:
    """A summary must not say `OK  4 tasks` while two tasks of a disabled worker have been dead
    for minutes, nor the per-task column `-` for every task."""
    import json
    import time

    from orchestration.cli import main
    from pipelines.config import get_settings
    from pipelines.control import ControlStore, TaskStatus

    state = tmp_path / "state"
    store = ControlStore(f"sqlite:///{state / 'control.db'}")
    now = time.time()
    store.report_tasks(
        [
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id=f"w{p % 2}",
                pid=1,
                next_offset=100,
                end_offset=100 if p % 2 == 0 else 500,
                heartbeat_at=now if p % 2 == 0 and p < 4 else now - 600,
            )
            for p in range(5)  # events:4 is caught up but has not reported for 10 minutes
        ]
    )
    store.close()
    monkeypatch.setenv("SLUICE_STATE_DIR", str(state))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)  # no broker: reports only
    monkeypatch.setenv("COLUMNS", "200")  # a terminal wide enough for whole task names
    get_settings.cache_clear()
    try:
        assert main(["status", "--once"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    summary = next(line for line in out.splitlines() if "tasks" in line and "in " in line)
    assert summary.startswith("STOP") and "(3 stale)" in summary
    rows = {
        next(word for word in line.split() if word.startswith("events:")): line
        for line in out.splitlines()
        if "events:" in line
    }
    assert "STOP" in rows["events:1"] and "STOP" in rows["events:3"]
    assert "STOP" in rows["events:4"]  # no backlog, but nobody is watching it either
    assert "OK" in rows["events:0"]

    snapshot = json.loads(_status_output(tmp_path / "state", monkeypatch, capsys, "--json"))
    assert {row["task"]: row["status"] for row in snapshot} == {
        "events:0": "OK",
        "events:1": "STOP",
        "events:2": "OK",
        "events:3": "STOP",
        "events:4": "STOP",
    }


def _status_output(state, monkeypatch, capsys, *args: str) -> str:
    from orchestration.cli import main
    from pipelines.config import get_settings

    monkeypatch.setenv("SLUICE_STATE_DIR", str(state))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)  # no broker: reports only
    monkeypatch.setenv("COLUMNS", "240")
    get_settings.cache_clear()
    try:
        assert main(["status", *args]) == 0
    finally:
        get_settings.cache_clear()
    return capsys.readouterr().out


def test_status_shows_waiting_unassigned_and_disabled_from_the_job_model(
    tmp_path, monkeypatch, capsys
) -> None:
    """Every task's Mist state and generation; a Waiting task (its agent lost), a task never
    reported, an operator-Disabled task and a disabled view each keep the summary from OK
    and are counted in it."""
    import json
    import time

    from sqlalchemy import update

    from pipelines.control import ControlStore, TaskStatus
    from pipelines.control.jobs import task_assignments

    state = tmp_path / "state"
    store = ControlStore(f"sqlite:///{state / 'control.db'}")
    jobs = store.jobs
    now = time.time()
    jobs.register_agent("a0", "host-0", 10, "events")
    jobs.ensure_tasks("events", [0, 1, 2, 3, 4])
    for p in range(5):
        jobs.schedule(f"events:{p}", 0, "a0", "test")
    for p in (0, 1, 2):
        jobs.mark_running(f"events:{p}", "a0", 1, "restored")
    jobs.unassign("events:1", 1, "a0", "agent a0 lost: no heartbeat for 12.0s")
    with store.engine.begin() as conn:  # Waiting longer than SLUICE_TASK_WAITING_MAX_S
        conn.execute(
            update(task_assignments)
            .where(task_assignments.c.task == "events:1")
            .values(since=now - 90)
        )
    for _ in range(3):
        jobs.record_view_crash("events:2", "traffic_by_org", "state unreadable")
    jobs.set_task_state("events:4", "Disabled", "operator: bad partition")
    jobs.acquire_lease("coordinator", "a0", 30)
    shares = {"read": 0.12, "decode": 0.2, "aggregate": 0.3, "archive": 0.0, "flush": 0.05}
    store.report_worker("a0", 10, ["events:0"], "running", {**shares, "checkpoint": 0.02})
    store.report_tasks(
        [
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id="a0",
                pid=10,
                next_offset=100,
                end_offset=100,
                heartbeat_at=now,
                generation=1,
            )
            for p in (0, 1, 2)
        ]
    )
    store.close()
    out = _status_output(state, monkeypatch, capsys, "--once")
    rows = {
        next(word for word in line.split() if word.startswith("events:")): line
        for line in out.splitlines()
        if "events:" in line and "│" in line
    }
    assert "OK" in rows["events:0"] and "Running g1" in rows["events:0"]
    assert "STOP" in rows["events:1"] and "Waiting" in rows["events:1"]
    assert "WARN" in rows["events:2"] and "traffic_by_org off" in rows["events:2"]
    assert "Scheduled g1" in rows["events:3"]  # assigned, never reported: still a row
    assert "STOP" in rows["events:4"] and "Disabled" in rows["events:4"]
    summary = next(line for line in out.splitlines() if " tasks" in line and "backlog" in line)
    assert summary.startswith("STOP") and "5 tasks" in summary
    for part in ("1 waiting", "1 scheduled", "1 disabled", "1 view disabled"):
        assert part in summary, summary
    assert "coordinator" in out and "host-0" in out  # the agents table
    overdue = next(line for line in out.splitlines() if "SLUICE_TASK_WAITING_MAX_S" in line)
    assert "Waiting longer than 60s" in overdue and "events:1 Waiting 9" in overdue
    assert "events:3" not in overdue and "agent a0 lost" in out
    assert "read 12% decode 20% aggregate 30% flush 5% checkpoint 2%" in out

    snapshot = json.loads(_status_output(state, monkeypatch, capsys, "--json"))
    by_task = {row["task"]: row for row in snapshot}
    assert by_task["events:1"]["job_state"] == "Waiting"
    assert "lost" in by_task["events:1"]["job_reason"]
    assert by_task["events:1"]["waiting_too_long"] is True
    assert by_task["events:2"]["disabled_views"] == ["traffic_by_org"]
    assert by_task["events:3"] == {
        "task": "events:3",
        "status": "WARN",
        "job_state": "Scheduled",
        "job_reason": "test",
        "agent_id": "a0",
        "disabled_views": [],
        "waiting_too_long": False,
    }


def test_on_an_80_column_terminal_the_table_keeps_whole_headers_and_task_names() -> None:
    """Seen in the tmux test of `up`: fifteen columns squeezed to `t…`, `s…` on 80 columns."""
    import io
    import time

    from rich.console import Console

    from orchestration.cli.status import render
    from orchestration.control_plane.lag import task_lags
    from pipelines.control import TaskStatus

    now = time.time()
    statuses = [
        TaskStatus(
            task=f"events:{p}",
            topic="events",
            partition=p,
            worker_id="vm-a0",
            pid=100,
            next_offset=100,
            end_offset=150,
            heartbeat_at=now,
        )
        for p in range(4)
    ]
    lags = task_lags(statuses, now=now)
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(render(lags, width=80))
    text = out.getvalue()
    for header in ("task", "status", "agent", "rate/s", "backlog", "time lag", "seen"):
        assert header in text, text
    assert all(f"events:{p}" in text for p in range(4)), text
    assert "…" not in text, text
    wide = io.StringIO()
    Console(file=wide, width=200, color_system=None).print(render(lags, width=200))
    assert "checkpoint" in wide.getvalue() and "checkpoint" not in text


def test_a_virtual_task_shows_its_bucket_and_its_share_of_the_backlog(tmp_path) -> None:
    """A bucket of 4 that ran over a partition's records: status shows ``b/4``, the share of
    the records it kept and its hashing time, and a quarter of the offset gap as backlog."""
    import io
    import time

    from rich.console import Console

    from orchestration.cli.status import render
    from orchestration.control_plane.lag import task_lags
    from pipelines.config import PROJECT_ROOT, SluiceSettings
    from pipelines.generator import GeneratorOptions, load_trace, synthesize
    from pipelines.storage import LocalObjectStore
    from pipelines.stream.task import StreamTask
    from pipelines.testing import CollectingDeadLetters, Record
    from pipelines.views import load_views

    views = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if not v.is_session]
    messages = synthesize(load_trace("nyc_taxi"), GeneratorOptions(max_events=4_000))
    records = [Record(i, 1_000 + i, m.key, m.value) for i, m in enumerate(messages)]
    task = StreamTask(
        "events",
        2,
        views,
        LocalObjectStore(tmp_path),
        CollectingDeadLetters(),
        SluiceSettings(state_dir=tmp_path),
        bucket=3,
        factor=4,
    )
    task.restore()
    task.start_at(0)
    task.process(records)
    status = task.status("vm-a0", end_offset=len(records) + 400)
    assert status.task == "events:2#3/4" and status.backlog == 100
    assert 0 < task.kept < task.seen == len(records)
    out = io.StringIO()
    lags = task_lags([status], now=time.time())
    Console(file=out, width=220, color_system=None).print(render(lags, width=220))
    text = out.getvalue()
    share = f"{task.kept / task.seen:.0%}"
    assert "events:2#3/4" in text and f"3/4 {share}" in text, text


def test_status_counts_task_crashes_and_quarantined_records(tmp_path, monkeypatch, capsys) -> None:
    """A crash in the crash log and a record quarantined on a task are counted in the summary."""
    import time

    from pipelines.control import ControlStore, TaskCrash, TaskStatus

    state = tmp_path / "state"
    store = ControlStore(f"sqlite:///{state / 'control.db'}")
    store.crashes.record(TaskCrash("events:0", 10, 20, "ValueError: x", "traffic_by_org"))
    store.crashes.record(TaskCrash("events:0", 12, 13, "ValueError: x", "traffic_by_org", 5))
    store.report_tasks(
        [
            TaskStatus(
                task="events:0",
                topic="events",
                partition=0,
                worker_id="a0",
                pid=10,
                consumed=100,
                dead_lettered=1,
                next_offset=100,
                end_offset=100,
                heartbeat_at=time.time(),
                views={"dead_letter_reasons": {"crashed_task": 1}, "quarantined": 1},
            )
        ]
    )
    store.close()
    out = _status_output(state, monkeypatch, capsys, "--once")
    summary = next(line for line in out.splitlines() if " tasks" in line and "backlog" in line)
    assert "2 task crashes lately" in summary and "1 record quarantined" in summary, summary
    assert summary.startswith("WARN"), summary
