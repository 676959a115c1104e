"""The sensor does not decide on a fleet in the middle of a rescale (seen on the live loop: one
of three new workers reporting looked like a one-worker fleet and launched a second 1 -> 3 run;
the first report after a restart, measured against the stopped fleet's frozen backlog, looked
like a burst and scaled a quiet fleet up)."""

from __future__ import annotations

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.sensors.autoscaler import (
    STARTUP_GRACE_S,
    decide_scaling,
    measure_start,
    priced_start_s,
)
from pipelines.control import TaskStatus

NOW = 50_000.0


def _overloaded(now: float, backlog: int) -> list[TaskStatus]:
    """One worker reporting, busy all the time, its backlog growing."""
    return [
        TaskStatus(
            task=f"events:{p}",
            topic="events",
            partition=p,
            worker_id="w0",
            pid=1000,
            consumed=10_000,
            rate_in=100.0,
            utilization=1.0,
            backlog=backlog,
            end_offset=10_000 + backlog,
            next_offset=10_000,
            heartbeat_at=now,
        )
        for p in range(6)
    ]


def _ticks(
    fleet, settings: AutoscaleSettings, ticks: int = 4, default_start_s: float | None = None
) -> list[dict | None]:
    """The sensor's request (or None) on each of ``ticks`` ticks 2 s apart."""
    return _ticking(fleet, settings, ticks, default_start_s)[0]


def _ticking(
    fleet, settings: AutoscaleSettings, ticks: int = 4, default_start_s: float | None = None
) -> tuple[list[dict | None], dict]:
    """(the sensor's request or None on each of ``ticks`` ticks 2 s apart, the last cursor)."""
    cursor: dict = {}
    requests = []
    for step in range(ticks):
        now = NOW + 2 * step
        request, cursor = decide_scaling(
            _overloaded(now, 5_000 + 2_000 * step),
            cursor,
            policy_name="ds2",
            settings=settings,
            now=now,
            cooldown_s=0,
            fleet=fleet,
            default_start_s=default_start_s,
        )
        requests.append(request)
    assert len(cursor["history"]) == ticks  # snapshots are kept whether or not it decides
    return requests, cursor


def test_a_settled_fleet_is_scaled(settings):
    settled = {"desired_workers": 1, "applied_workers": 1, "applied_at": NOW - 600}
    *_, last = _ticks(settled, settings)
    assert last is not None and last["target"] > 1 and last["current"] == 1


def test_no_decision_while_new_workers_are_starting_or_a_rescale_is_pending(settings):
    starting = {"desired_workers": 3, "applied_workers": 3, "applied_at": NOW - 5}
    assert _ticks(starting, settings) == [None] * 4
    pending = {"desired_workers": 3, "applied_workers": 1, "applied_at": NOW - 600}
    assert _ticks(pending, settings) == [None] * 4


def test_growth_is_measured_only_between_snapshots_of_the_rescaled_fleet(settings):
    # applied between the first and second tick: the second has only a pre-rescale snapshot
    # to compare with, the third compares two snapshots of the new fleet and may decide
    just_applied = {"desired_workers": 1, "applied_workers": 1, "applied_at": NOW + 1}
    requests = _ticks(just_applied, settings)
    assert requests[1] is None
    assert requests[2] is not None and requests[2]["target"] > 1


def test_a_worker_that_never_reports_does_not_block_scaling_for_good(settings):
    late = {"desired_workers": 3, "applied_workers": 3, "applied_at": NOW - STARTUP_GRACE_S - 1}
    *_, last = _ticks(late, settings)
    assert last is not None and last["current"] == 1


def test_a_scale_up_is_priced_at_the_start_time_the_fleet_measured(settings):
    # the first scale-up is priced at the backend's start; once the fleet's scaling record
    # shows it applied 42 s after it was requested, the next is priced at the measured 42 s
    settled = {"desired_workers": 1, "applied_workers": 1, "applied_at": NOW - 600}
    (*_, request), cursor = _ticking(settled, settings, default_start_s=180.0)
    assert request is not None and request["target"] > 1
    assert cursor["scale_up"] == {"target": request["target"]} and cursor["starts"] == []
    assert priced_start_s(settings, cursor["starts"], 180.0) == 180.0
    target, asked = request["target"], NOW + 10
    pending = {"desired_workers": target, "applied_workers": 1, "requested_at": asked}
    assert measure_start(cursor, pending) == ([], {"target": target})
    applied = {**pending, "applied_workers": target, "applied_at": asked + 42.0}
    starts, waiting = measure_start(cursor, applied)
    assert (starts, waiting) == ([42.0], None)
    assert priced_start_s(settings, [*starts, 30.0, 60.0], 180.0) == 42.0
    # a newer request replaced the scale-up: its record measures something else
    replaced = {**applied, "desired_workers": target + 1}
    assert measure_start(cursor, replaced) == ([], None)
    assert priced_start_s(settings, [], None) == settings.fleet.scale_up_start_s
    # a start the user set is used as given, whatever was measured
    fixed = settings.model_copy(
        update={"fleet": settings.fleet.model_copy(update={"scale_up_start_s": 7.0})}
    )
    fixed.fleet.model_fields_set.add("scale_up_start_s")
    assert priced_start_s(fixed, [42.0], 180.0) == 7.0
