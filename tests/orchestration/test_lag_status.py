"""Burrow-style lag evaluation over a sliding window of samples."""

from __future__ import annotations

import pytest

from orchestration.lag import LagSample, lag_status, worst


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
    """Seen by a user: `OK  4 tasks` while two tasks of a disabled worker had been dead for
    minutes; the per-task column was `-` for every task."""
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
                heartbeat_at=now if p % 2 == 0 else now - 600,
            )
            for p in range(4)
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
    assert summary.startswith("STOP") and "(2 stale)" in summary
    rows = {
        next(word for word in line.split() if word.startswith("events:")): line
        for line in out.splitlines()
        if "events:" in line
    }
    assert "STOP" in rows["events:1"] and "STOP" in rows["events:3"]
    assert "OK" in rows["events:0"]
