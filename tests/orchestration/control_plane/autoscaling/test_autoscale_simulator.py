"""The simulator against answers worked out by hand: a constant rate, a single step."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from autoscale_builders import trace_of

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.exceptions import (
    TraceFormatError,
    TraceNotFound,
)
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.pause import rescale_loss_s
from orchestration.control_plane.autoscaling.policies import POLICIES, StaticPolicy, make_policy
from orchestration.control_plane.autoscaling.realizers import SimulatedRealizer
from orchestration.control_plane.autoscaling.simulator import (
    TRACES_DIR,
    Simulator,
    Trace,
    load_trace,
    simulate,
    summarise,
)
from pipelines.generator import InvalidTraceParameter

HOUR = 3600.0


class Scripted:
    """Asks for `plan[k]` workers at decision k (the last entry afterwards)."""

    name = "scripted"

    def __init__(self, plan: Sequence[int]) -> None:
        self.plan = list(plan)
        self.seen: list[FleetMetrics] = []

    def decide(self, metrics: FleetMetrics, history: Sequence[FleetMetrics]) -> ScalingDecision:
        self.seen.append(metrics)
        k = min(len(history), len(self.plan) - 1)
        return ScalingDecision(self.plan[k], "script", self.name, current=metrics.workers)


def fleet(settings: AutoscaleSettings, partitions: int, peak: float) -> AutoscaleSettings:
    return settings.updated(
        fleet={"partitions": partitions, "worker_rate": 1000.0},
        simulation={"peak_rate": peak, "step_s": 300.0, "tick_s": 10.0, "sla_s": 600.0},
    )


def test_constant_rate_static_fleet(settings: AutoscaleSettings) -> None:
    s = fleet(settings, partitions=20, peak=10000.0)
    sim = Simulator(trace_of([1.0] * 289), s)  # 24 h of 10000 msg/s
    policy = StaticPolicy.from_settings(s)
    assert policy.workers == 10  # 20 partitions, 2 per worker: exactly 10000 msg/s
    summary = sim.run(policy).summary()
    assert summary.worker_hours == pytest.approx(240.0)
    assert summary.mean_utilisation == pytest.approx(1.0)
    assert summary.max_lag_s == 0.0
    assert summary.sla_violation_minutes == 0.0
    assert summary.rescales == 0


def test_single_step_above_capacity_builds_the_lag_worked_out_by_hand(
    settings: AutoscaleSettings,
) -> None:
    # 5000 msg/s for an hour, then 15000 msg/s for an hour; 10 workers carry 10000 msg/s
    s = fleet(settings, partitions=20, peak=15000.0)
    trace = Trace("step", np.array([0.0, HOUR, HOUR + 10, 2 * HOUR]), np.array([1, 1, 3, 3.0]))
    result = Simulator(trace, s).run(Scripted([10]))
    last = result.records[-1]
    # backlog grows 5000 msg/s for ~3590 s
    assert last.backlog == pytest.approx(5000.0 * 3590, rel=0.01)
    # the message processed at 2 h arrived at 1 h + 2/3 h: lag = 1/3 h
    assert last.time_lag == pytest.approx(1200.0, abs=15)
    # lag exceeds 600 s from 1 h + 1800 s on: 30 minutes of violation
    assert result.summary().sla_violation_minutes == pytest.approx(30.0, abs=0.5)
    before = [r for r in result.records if r.time <= HOUR]
    assert all(r.backlog < 1 and r.time_lag == 0 for r in before)


def test_rescale_pauses_processing_and_backlog_carries_over(settings: AutoscaleSettings) -> None:
    s = fleet(settings, partitions=20, peak=5000.0).updated(
        fleet={"move_pause_s": 120.0, "state_mb_per_task": 0.0, "scale_up_start_s": 20.0}
    )
    now = [0.0]
    realizer = SimulatedRealizer(10, clock=lambda: now[0])
    result = Simulator(trace_of([1.0] * 13), s).run(Scripted([10, 20]), realizer=realizer)
    summary = result.summary()
    assert summary.rescales == 1
    assert len(realizer.events) == 1 and realizer.events[0].after == 20
    # 10 -> 20 moves half the 20 tasks, 120 s each: 60 s of the whole fleet's work; the half
    # of the capacity it adds is missing while its workers start, 20 s: 10 s more
    assert [r.tasks_moved for r in result.records if r.rescaled] == [10]
    assert summary.pause_minutes == pytest.approx(70.0 / 60.0)
    # the oldest message waits those 70 s, then 20 workers drain it
    assert summary.max_lag_s == pytest.approx(70.0, abs=10.0)
    assert result.records[1].backlog < 1.0
    assert result.records[1].processing_rate == pytest.approx(5000.0, rel=0.01)


def test_uneven_partitions_bound_the_fleet_by_its_most_loaded_worker(
    settings: AutoscaleSettings,
) -> None:
    # 288 partitions at 28000 msg/s: 28 workers (11 partitions on some) carry 26182 msg/s
    s = fleet(settings, partitions=288, peak=28000.0)
    realizer = SimulatedRealizer(28, clock=lambda: 0.0)
    result = Simulator(trace_of([1.0] * 13), s).run(Scripted([28]), realizer=realizer)
    growth = result.records[-1].backlog / (12 * 300.0)
    assert growth == pytest.approx(28000.0 - 288 / 11 * 1000.0, rel=0.01)
    assert StaticPolicy.from_settings(s).workers == 29  # 10 partitions each at most: 28800


def test_policies_see_the_metrics_the_fleet_produced(settings: AutoscaleSettings) -> None:
    s = fleet(settings, partitions=20, peak=5000.0)
    policy = Scripted([5])
    Simulator(trace_of([1.0] * 7), s).run(policy, realizer=SimulatedRealizer(5, clock=lambda: 0))
    m = policy.seen[3]
    assert m.input_rate == pytest.approx(5000.0)
    assert m.workers == 5
    assert m.utilisation == pytest.approx(1.0)
    assert m.true_processing_rate == pytest.approx(1000.0)
    assert m.backlog == pytest.approx(0.0, abs=1.0)


def test_every_policy_runs_on_a_shipped_trace(settings: AutoscaleSettings) -> None:
    s = settings.updated(simulation={"days": 0.5}, mcts={"samples": 8})
    results = simulate(load_trace("elb_request_count_8c0756"), list(POLICIES), s)
    summaries = {x.policy: x for x in summarise(results)}
    assert set(summaries) == set(POLICIES)
    static = summaries["static"]
    assert static.savings_vs_static == 1.0 and static.sla_violation_minutes == 0
    for x in summaries.values():
        assert x.worker_hours > 0 and 0 < x.mean_utilisation <= 1
    assert summaries["mcts"].worker_hours < static.worker_hours / 1.5
    assert summaries["mcts"].sla_violation_minutes == 0


def test_shipped_traces_are_found_by_name() -> None:
    assert (TRACES_DIR / "nyc_taxi.csv").is_file()
    trace = load_trace("nyc_taxi").cut(2)
    assert trace.duration_s <= 2 * 86400
    assert trace.scaled(100.0).values.max() == pytest.approx(100.0)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("timestamp,value\n2020-01-01 00:00:00,1\nnot-a-time,2\n", "bad timestamp"),
        ("timestamp,value\n2020-01-01 00:00:00,1\n2020-01-01 00:05:00,abc\n", "bad value"),
        ("timestamp,value\n2020-01-01 00:00:00,1\n2020-01-01 00:05:00,-4\n", ">= 0"),
        ("timestamp,value\n2020-01-01 00:05:00,1\n2020-01-01 00:00:00,2\n", "does not increase"),
        ("timestamp,value\n2020-01-01 00:00:00,1\n", "at least 2 rows"),
        ("just one column\n", "expected timestamp,value"),
    ],
)
def test_bad_csv_is_a_clear_error(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(TraceFormatError, match=match):
        load_trace(path)


def test_missing_trace_and_bad_parameters(tmp_path: Path, settings: AutoscaleSettings) -> None:
    with pytest.raises(TraceNotFound, match=r"nope\.csv"):
        load_trace(tmp_path / "nope.csv")
    trace = trace_of([1.0, 2.0])
    with pytest.raises(InvalidTraceParameter, match="-5"):
        trace.scaled(-5.0)
    with pytest.raises(InvalidTraceParameter, match="days"):
        trace.cut(0.0)


def test_mcts_holds_a_noisy_flat_load_without_rescaling(settings: AutoscaleSettings) -> None:
    # 30 h of 5-minute rates within +-15% of a flat 10000 msg/s: noise, not a trend
    rng = np.random.default_rng(7)
    rates = list(10_000.0 * (1.0 + rng.uniform(-0.15, 0.15, 12 * 30)))
    s = fleet(settings, partitions=288, peak=max(rates))
    # start where the plan's 5% forecast margin puts 10000 msg/s: 11 workers (carrying 10667)
    assert s.mcts.forecast_margin == 0.05
    realizer = SimulatedRealizer(11, clock=lambda: 0.0)
    result = Simulator(trace_of(rates), s).run(make_policy("mcts", s), realizer=realizer)
    summary = result.summary()
    assert summary.rescales == 0, [r.reason for r in result.records if r.rescaled]
    assert summary.pause_minutes == 0.0
    assert summary.sla_violation_minutes == 0.0


def test_mcts_rescales_at_most_about_once_an_hour_on_a_shipped_trace(
    settings: AutoscaleSettings,
) -> None:
    s = settings.updated(simulation={"days": 2.0})
    sim, policy = Simulator(load_trace("nyc_taxi"), s), make_policy("mcts", s)
    first = sim.initial_workers(policy)
    result = sim.run(policy)
    summary = result.summary()
    assert summary.sla_violation_minutes == 0.0
    assert summary.rescales_per_day <= 24.0
    # each rescale lost what its moves cost (the moved tasks' pause, not the fleet's, and the
    # added capacity's late arrival), as the planner priced it
    fleet_ = s.fleet
    task_pause = fleet_.move_pause_s + fleet_.move_pause_per_state_mb_s * fleet_.state_mb_per_task
    counts = [first, *(r.workers for r in result.records)]
    moves = [(a, b) for a, b in pairwise(counts) if a != b]
    assert len(moves) == summary.rescales > 0
    expected = sum(
        float(rescale_loss_s(a, b, fleet_.partitions, task_pause, fleet_.scale_up_start_s))
        for a, b in moves
    )
    assert summary.pause_minutes == pytest.approx(expected / 60.0)
