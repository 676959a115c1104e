"""The lag SLA check of a realtime view, from its tasks' reports."""

from __future__ import annotations

from assets.views.lag_check import LAG_CHECK, evaluate_lag
from pipelines.control import TaskStatus
from tests.fixtures.dagster_fixture import example_views

NOW = 1_800_000_000.0
VIEW = next(v for v in example_views() if v.name == "traffic_by_org")


def _status(p: int, backlog: int, processed_age_s: float, report_age_s: float = 1.0):
    return TaskStatus(
        task=f"events:{p}",
        topic="events",
        partition=p,
        worker_id="a0",
        pid=1,
        next_offset=1000,
        end_offset=1000 + backlog,
        last_processed_ts=(NOW - processed_age_s) * 1000,
        heartbeat_at=NOW - report_age_s,
    )


def test_caught_up_tasks_are_within_the_sla_however_old_their_last_record() -> None:
    result = evaluate_lag(VIEW, [_status(0, 0, 3600), _status(1, 0, 10)], 600, now=NOW)
    assert result.passed and result.check_name == LAG_CHECK
    assert result.metadata["time_lag_s"].value == 0


def test_a_task_behind_by_more_than_the_sla_fails_it() -> None:
    result = evaluate_lag(VIEW, [_status(0, 0, 1), _status(1, 5000, 900)], 600, now=NOW)
    assert not result.passed
    assert "events:1" in result.description and result.metadata["backlog"].value == 5000
    assert 899 <= result.metadata["time_lag_s"].value <= 901
    assert evaluate_lag(VIEW, [_status(1, 5000, 300)], 600, now=NOW).passed


def test_a_task_that_stopped_reporting_fails_it_even_without_backlog() -> None:
    result = evaluate_lag(
        VIEW, [_status(0, 0, 1), _status(1, 0, 1, report_age_s=120)], 600, now=NOW
    )
    assert not result.passed and "stopped reporting" in result.description


def test_no_task_at_all_fails_it() -> None:
    assert not evaluate_lag(VIEW, [], 600, now=NOW).passed
