"""The Metamarkets planner on the seed's situations, its rescale costs, and its speed and
determinism."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import numpy as np
import pytest
from autoscale_builders import snapshot
from closed_loop_settings import AUTOSCALE_ENV

from orchestration.control_plane.autoscaling.capacity import efficient_count
from orchestration.control_plane.autoscaling.config import AutoscaleSettings, MctsSettings
from orchestration.control_plane.autoscaling.explain import describe_plan, plan_markdown
from orchestration.control_plane.autoscaling.mcts import (
    MctsPlanner,
    PlanningProblem,
    sla_window_arrivals,
)
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.pause import (
    fleet_pause_s,
    rebucketing_steps,
    rescale_loss_s,
    tasks_moved,
)
from orchestration.control_plane.autoscaling.policies import MctsPolicy
from pipelines.settings import load_settings


def problem(
    *,
    workers: int,
    partitions: int,
    rate: float,
    backlog: float,
    sla_s: float,
    steps: int = 24,
    lo: int = 1,
    hi: int | None = None,
    rates: np.ndarray | None = None,
) -> PlanningProblem:
    future = np.full(steps, rate) if rates is None else rates
    past = np.full(4, rate)
    return PlanningProblem(
        workers=workers,
        partitions=partitions,
        worker_rate=1000.0,
        backlog=backlog,
        rates=future,
        sla_arrivals=sla_window_arrivals(past, future, 300.0, sla_s),
        step_s=300.0,
        min_workers=lo,
        max_workers=hi,
        task_pause_s=60.0,
    )


def seed_example(sla_s: float) -> PlanningProblem:
    """2 workers, 2000 msg/s in, 4 minutes of lag; the planner may choose 1, 2 or 3."""
    return problem(workers=2, partitions=6, rate=2000.0, backlog=240 * 2000.0, sla_s=sla_s, hi=3)


def test_children_are_n_plus_minus_powers_of_k_in_bounds() -> None:
    planner = MctsPlanner(MctsSettings(k=2))
    # 8 +- 1, 2, 4, 8, 16, 32, 64 over 64 partitions, snapped: 9 -> 8, 12 -> 11, 24 -> 22,
    # 40 -> 32 (9 workers carry what 8 carry); the first step past a bound lands on it (1, 64);
    # plus the next capacity levels, 7 and 10
    assert planner.children(8, 1, 64, 64) == [1, 4, 6, 7, 8, 10, 11, 16, 22, 32, 64]
    # over 1000 partitions small counts are all efficient; 136 -> 125, 264 -> 250, 520 -> 500
    assert planner.children(8, 1, 1000, 1000) == [
        1,
        4,
        6,
        7,
        8,
        9,
        10,
        12,
        16,
        24,
        40,
        72,
        125,
        250,
        500,
        1000,
    ]
    assert planner.children(1, 1, 3, 6) == [1, 2, 3]
    # 1 + 2 = 3 workers over 4 partitions carry what 2 carry: without the bound as a child, a
    # fleet of one could not reach its full 4 in one move
    assert planner.children(1, 1, 4, 4) == [1, 2, 4]
    # over 288 partitions counts snap to the cheapest with the same capacity: no 25, 26, 28
    kids = planner.children(27, 1, 288, 288)
    assert all(efficient_count(k, 288) == k for k in kids)
    assert {24, 27, 29} <= set(kids)


def test_seed_example_holding_two_meets_the_sla_at_least_cost() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0))
    p = seed_example(sla_s=600.0)
    plan = planner.plan(p)
    assert plan.first == 2
    assert min(plan.first_costs, key=plan.first_costs.get) == 2
    # held steady, 1 grows the backlog past the SLA, 2 holds it, 3 drains it at a worker's cost
    steady = {n: planner.evaluate(p, [n] * p.steps) for n in (1, 2, 3)}
    assert steady[2] < steady[3] < steady[1]


def test_seed_example_with_lag_beyond_the_sla_drains_with_three() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0))
    plan = planner.plan(seed_example(sla_s=180.0))
    assert plan.first == 3


def test_288_partitions_demand_near_26_beats_a_steady_32() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0, forecast_margin=0.0))
    p = problem(workers=32, partitions=288, rate=26000.0, backlog=0.0, sla_s=600.0)
    plan = planner.plan(p)
    steady_32 = planner.evaluate(p, [32] * p.steps)
    assert plan.cost < steady_32
    # the plan only uses counts whose capacity is not wasted (24, 27, 29, 32; never 25-26)
    assert all(efficient_count(s.workers, 288) == s.workers for s in plan.segments)
    assert 24 <= plan.first < 32
    # and its cost is that of a real schedule
    schedule = [s.workers for s in plan.segments for _ in range(int(s.duration_s // 300))]
    assert planner.evaluate(p, schedule) == pytest.approx(plan.cost, rel=1e-6)


def test_forecast_ramp_is_met_just_in_time_not_now() -> None:
    planner = MctsPlanner()
    rates = np.concatenate((np.full(12, 2000.0), np.full(12, 20000.0)))
    p = problem(workers=2, partitions=64, rate=2000.0, backlog=0.0, sla_s=600.0, rates=rates)
    plan = planner.plan(p)
    assert plan.first <= 3
    later = [s for s in plan.segments if s.start_s >= 3600 - 600]
    assert later and max(s.workers for s in later) >= 20


def test_same_seed_same_plan() -> None:
    p = problem(workers=10, partitions=288, rate=17000.0, backlog=2e6, sla_s=600.0)
    a = MctsPlanner(MctsSettings(seed=7)).plan(p, salt=3)
    b = MctsPlanner(MctsSettings(seed=7)).plan(p, salt=3)
    assert a == b


def test_p99_decision_time_is_under_a_second() -> None:
    planner = MctsPlanner()
    rng = np.random.default_rng(0)
    times = []
    for _ in range(40):
        rates = rng.uniform(5000, 30000, 24)
        p = problem(
            workers=int(rng.integers(1, 40)),
            partitions=288,
            rate=0.0,
            backlog=float(rng.uniform(0, 5e6)),
            sla_s=600.0,
            rates=rates,
        )
        started = time.perf_counter()
        planner.plan(p)
        times.append(time.perf_counter() - started)
    assert np.percentile(times, 99) < 1.0


def test_an_exhausted_time_budget_still_gives_a_plan() -> None:
    planner = MctsPlanner(MctsSettings(max_decision_s=1e-9))
    plan = planner.plan(seed_example(sla_s=600.0))
    assert plan.first in (1, 2, 3)
    assert plan.expansions == 1


def test_a_rescale_costs_its_penalty_plus_the_capacity_its_pause_loses() -> None:
    def planner(fixed: float, per_worker_s: float) -> MctsPlanner:
        return MctsPlanner(
            MctsSettings(sla_safety=1.0, rescale_cost=fixed, rescale_penalty_s=per_worker_s)
        )

    p = seed_example(sla_s=600.0)
    three, two = [3] * p.steps, [2] * p.steps
    free = planner(0.0, 0.0)
    # moving to 3 workers: the fixed penalty ...
    assert planner(5.0, 0.0).evaluate(p, three) - free.evaluate(p, three) == pytest.approx(5.0)
    # ... 600 s of the new fleet's work ...
    assert planner(0.0, 600.0).evaluate(p, three) - free.evaluate(p, three) == pytest.approx(
        3 * 600 / 3600
    )
    # ... and 3 workers paid through the pause of the tasks it moves: 2 of the 6 (the new
    # worker's share), 60 s each, is 20 s of the whole fleet (the backlog it leaves drains
    # well inside the SLA)
    assert tasks_moved(2, 3, 6) == 2 and fleet_pause_s(2, 3, 6, 60.0) == pytest.approx(20.0)
    assert rescale_loss_s(2, 3, 6, 60.0) == pytest.approx(20.0)
    no_pause = replace(p, task_pause_s=0.0)
    lost = free.evaluate(p, three) - free.evaluate(no_pause, three)
    assert lost == pytest.approx(3 * 20 / 3600)
    # a late start of the new worker (10 s) costs its third of the capacity that long
    late = replace(p, scale_up_start_s=10.0)
    assert free.evaluate(late, three) - free.evaluate(p, three) == pytest.approx(3 * 10 / 3 / 3600)
    # the budget's factor multiplies the penalty, not the lost capacity
    raised = replace(p, penalty_factor=3.0)
    assert planner(5.0, 600.0).evaluate(raised, three) - free.evaluate(p, three) == pytest.approx(
        3 * (5.0 + 3 * 600 / 3600)
    )
    # holding costs no rescale at any penalty
    assert planner(5.0, 600.0).evaluate(raised, two) == free.evaluate(p, two)


def test_seed_example_beyond_the_sla_still_drains_whatever_the_penalty_or_dwell() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0))
    p = replace(seed_example(sla_s=180.0), penalty_factor=20.0, dwell_left_s=7200.0)
    # lag is past the SLA: every minute of it costs more than a rescale; a dwell never
    # blocks a scale-up
    assert planner.plan(p).first == 3


def test_288_partitions_near_26_hold_32_while_the_dwell_lasts() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0, forecast_margin=0.0))
    p = problem(workers=32, partitions=288, rate=26000.0, backlog=0.0, sla_s=600.0)
    assert planner.plan(p).first < 32  # no dwell: 27 carries 26000 msg/s for less
    held = planner.plan(replace(p, dwell_left_s=p.steps * p.step_s))
    assert held.first == 32
    assert all(s.workers >= 32 for s in held.segments)
    # an hour left: 32 holds through it (going up first is no way round a dwell)
    half = planner.plan(replace(p, dwell_left_s=3600.0))
    assert half.first == 32
    assert all(s.workers >= 32 for s in half.segments if s.start_s < 3600.0)


def test_288_partitions_near_26_a_penalty_above_the_saving_keeps_32() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0, forecast_margin=0.0))
    p = problem(workers=32, partitions=288, rate=26000.0, backlog=0.0, sla_s=600.0)
    steady_32 = planner.evaluate(p, [32] * p.steps)
    # 27 workers for 2 h save 5 x 2 worker-hours; a rescale to 27 costs 0.25 + 27 x 900 s of
    # penalty (7 worker-hours) + its pause: worth it, but not at twice the penalty
    moved = planner.plan(p)
    assert moved.first == 27
    assert moved.cost < steady_32
    assert planner.plan(replace(p, penalty_factor=2.0)).first == 32


def test_hysteresis_a_move_must_beat_staying_by_the_margin() -> None:
    p = problem(workers=32, partitions=288, rate=26000.0, backlog=0.0, sla_s=600.0)
    base = {"sla_safety": 1.0, "forecast_margin": 0.0, "rescale_penalty_s": 0.0}
    holding = MctsPlanner(MctsSettings(**base)).evaluate(p, [32] * p.steps)
    moved = MctsPlanner(MctsSettings(**base, hysteresis=0.05)).plan(p)
    assert moved.first < 32  # fewer workers for 2 h save more than 5% of holding 32
    assert moved.cost < 0.95 * holding
    stay = MctsPlanner(MctsSettings(**base, hysteresis=0.5)).plan(p)
    assert stay.first == 32  # but not half of it
    assert stay.cost == pytest.approx(stay.first_costs[32])


def test_dwell_grows_with_the_rescale_cost() -> None:
    planner = MctsPlanner(MctsSettings(min_dwell_s=300.0, dwell_per_cost_s=1800.0))
    small, large = planner.dwell_s(2, 60.0), planner.dwell_s(40, 60.0)
    assert small == pytest.approx(300.0 + 1800.0 * (0.25 + 2 * (60 + 900) / 3600))
    assert large > small
    assert MctsPlanner().dwell_s(40, 60.0) == 0.0  # off by default


def test_288_partitions_near_26_no_plan_goes_below_the_down_floor() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0, forecast_margin=0.0, rescale_penalty_s=0))
    p = problem(workers=32, partitions=288, rate=26000.0, backlog=0.0, sla_s=600.0)
    # the last hour averaged what 29 workers carry: 27 would be a dip, 29 is the floor
    plan = planner.plan(replace(p, down_floor=29))
    assert plan.first == 29
    assert all(s.workers >= 29 for s in plan.segments)
    # a floor above the current count does not force a scale-up
    assert planner.plan(replace(p, workers=24, down_floor=29)).first <= 27


def test_the_rescale_penalty_follows_the_budget_down_to_its_floor(
    settings: AutoscaleSettings,
) -> None:
    settings = settings.updated(
        mcts={"rescale_budget_per_h": 1.0, "rescale_budget_gain": 3.0, "rescale_budget_floor": 1.0}
    )
    policy = MctsPolicy(settings)

    def fleet_with(changes: int, hours: int = 6) -> tuple[FleetMetrics, list[FleetMetrics]]:
        # one snapshot every 5 minutes; the first `changes` of them alternate 4 and 5 workers
        snaps = [
            snapshot(time=300.0 * k, workers=4 + (k % 2 if k <= changes else changes % 2))
            for k in range(hours * 12 + 1)
        ]
        return snaps[-1], snaps[:-1]

    assert policy.penalty_factor(*fleet_with(0)) == 1.0
    assert policy.penalty_factor(*fleet_with(3)) == 1.0  # under the budget: not cheaper
    assert policy.penalty_factor(*fleet_with(6)) == pytest.approx(1.0)  # at the budget
    # 12 rescales in 6 h: twice the budget, e^(3 x 1)
    assert policy.penalty_factor(*fleet_with(12)) == pytest.approx(math.e**3)
    off = MctsPolicy(settings.updated(mcts={"rescale_budget_per_h": 0.0}))
    assert off.penalty_factor(*fleet_with(12)) == 1.0
    # with a floor, a budget left unused lowers the price: 3 of 6 is e^(3 x -0.5)
    cheaper = MctsPolicy(settings.updated(mcts={"rescale_budget_floor": 0.1}))
    assert cheaper.penalty_factor(*fleet_with(3)) == pytest.approx(math.e**-1.5)
    assert cheaper.penalty_factor(*fleet_with(0)) == pytest.approx(0.1)  # e^-3 floored
    assert cheaper.penalty_factor(*fleet_with(12)) == pytest.approx(math.e**3)


def test_a_rescale_seen_half_way_counts_once_against_the_budget(
    settings: AutoscaleSettings,
) -> None:
    """The live sensor snapshots a fleet whose new workers are still starting: 1 -> 2 -> 3
    30 s apart is one rescale; the same counts 5 minutes apart are two."""
    policy = MctsPolicy(settings.updated(mcts={"rescale_budget_per_h": 0.25}))

    def factor(counts: list[int], every_s: float) -> float:
        snaps = [snapshot(time=7200.0 + every_s * k, workers=n) for k, n in enumerate(counts)]
        quiet = [snapshot(time=300.0 * k, workers=counts[0]) for k in range(24)]
        return policy.penalty_factor(snaps[-1], [*quiet, *snaps[:-1]])

    # a 3 h span at 0.25 an hour allows 0.75 rescales: one is 1.33x over, two 2.67x
    gain = settings.mcts.rescale_budget_gain
    one, two = math.exp(gain * (1 / 0.75 - 1)), math.exp(gain * (2 / 0.75 - 1))
    assert factor([4, 5, 6, 6], every_s=30.0) == pytest.approx(one)
    assert factor([4, 5, 6, 6], every_s=300.0) == pytest.approx(two)
    # a way up and back down within the window is two, however quick
    assert factor([4, 5, 4, 4], every_s=30.0) == pytest.approx(two)


def test_the_down_floor_carries_the_last_hours_mean_rate(settings: AutoscaleSettings) -> None:
    policy = MctsPolicy(settings.updated(mcts={"down_floor_window_s": 3600.0}))
    times = np.arange(0.0, 7200.0 + 1, 300.0)
    # an hour at 26000 msg/s, then an hour at 20000: the floor follows the last hour's mean
    rates = np.where(times <= 3600.0, 26000.0, 20000.0)
    now = snapshot(time=7200.0, workers=32, partitions=288)
    assert policy.down_floor(now, times, rates, 1000.0) == 21  # 20000 msg/s: 14 partitions each
    assert policy.down_floor(now, times, np.full(times.size, 26000.0), 1000.0) == 27


def test_a_plan_splits_its_cost_and_names_the_best_rejected_alternative() -> None:
    planner = MctsPlanner(MctsSettings(sla_safety=1.0, forecast_margin=0.0))
    p = problem(workers=32, partitions=288, rate=26000.0, backlog=0.0, sla_s=600.0)
    plan = planner.plan(p)
    schedule = [s.workers for s in plan.segments for _ in range(int(s.duration_s // 300))]
    split = plan.split
    assert split is not None and split == planner.split(p, schedule)
    assert split.total == pytest.approx(plan.cost, rel=1e-6)
    assert split.rescale > 0 and split.hardware > 0 and split.sla == 0.0
    # holding 32 costs no rescale, only hardware: the split says so
    hold = planner.split(p, [32] * p.steps)
    assert hold.rescale == 0.0 and hold.hardware == pytest.approx(32 * 2.0)
    alternative = plan.alternative
    assert alternative is not None and alternative.first != plan.first
    assert alternative.cost == min(c for n, c in plan.first_costs.items() if n != plan.first)
    assert alternative.cost >= plan.cost
    explained = json.loads(json.dumps(plan.explain()))
    assert explained["segments"][0]["workers"] == plan.first
    assert explained["alternative"]["segments"][0]["workers"] == alternative.first
    text = describe_plan(explained)
    assert f"cost {split.total:.2f} = hardware {split.hardware:.2f}" in text
    assert "best rejected alternative" in text
    table = plan_markdown(explained)
    assert f"| rescale | {split.rescale:.3f} | {alternative.split.rescale:.3f} |" in table


def test_the_first_snapshot_after_a_rescale_is_no_reading_of_the_worker_rate() -> None:
    # live, after 2 -> 1 at 60 msg/s: the one worker busy restoring the moved tasks read
    # 38.5 msg/s at utilisation 0.51, and the plan went 1 -> 3
    policy = MctsPolicy(AutoscaleSettings())
    before = snapshot(time=0.0, workers=2, true_processing_rate=500.0, utilisation=0.06)
    restoring = snapshot(time=4.0, workers=1, true_processing_rate=38.5, utilisation=0.51)
    after = snapshot(time=6.0, workers=1, true_processing_rate=500.0, utilisation=0.12)
    assert policy.worker_rate(after, [before, restoring]) == 500.0
    assert policy.worker_rate(restoring, [before]) == 500.0


def test_the_worker_rate_comes_from_a_loaded_reading_not_an_idle_one() -> None:
    policy = MctsPolicy(AutoscaleSettings())
    loaded = snapshot(time=0.0, true_processing_rate=500.0, utilisation=0.9)
    idle = [snapshot(time=30.0 * i, true_processing_rate=150.0, utilisation=0.2) for i in (1, 2)]
    # a nearly idle worker reads 150 msg/s of fixed costs; the loaded reading is its rate
    assert policy.worker_rate(idle[-1], [loaded, idle[0]]) == 500.0
    # no loaded reading: the latest finite one; none at all: the configured rate
    assert policy.worker_rate(idle[-1], idle[:1]) == 150.0
    unknown = snapshot(true_processing_rate=math.nan)
    assert policy.worker_rate(unknown, []) == AutoscaleSettings().fleet.worker_rate
    # the plan is sized on it
    assert policy.problem(idle[-1], [loaded, idle[0]]).worker_rate == 500.0


def test_the_worker_rate_is_records_over_busy_time_across_the_loaded_readings() -> None:
    # one worker's 2 s status windows as (records, busy seconds): steady ones, and one that
    # caught a checkpoint slowed by a loaded disk (few records, mostly busy)
    windows = [(980, 1.96), (990, 1.98), (870, 1.95), (23, 1.58)]
    readings = [
        snapshot(time=2.0 * i, workers=1, true_processing_rate=n / busy, utilisation=busy / 2.0)
        for i, (n, busy) in enumerate(windows)
    ]
    policy = MctsPolicy(AutoscaleSettings())
    records, busy = sum(n for n, _ in windows), sum(b for _, b in windows)
    assert policy.worker_rate(readings[-1], readings[:-1]) == pytest.approx(records / busy)
    # the stalled window alone would say 14.6 msg per busy-second; with the others, 383
    assert policy.worker_rate(readings[-1], readings[:-1]) > 0.75 * 980 / 1.96


NAN = math.nan
STALLED_RUN = [  # (at, workers, input, processing, true rate, utilisation, backlog, growth, lag)
    (7.3, 1, 0, 0, NAN, 0, 0, NAN, 0),
    (9.33, 1, 59.6, 59.6, 500, 0.119, 0, 0, 0),
    (11.45, 1, 57.4, 57.4, 180, 0.319, 0, 0, 0),
    (13.52, 1, 59.8, 59.8, 500, 0.12, 0, 0, 0),
    (15.57, 1, 58.7, 58.7, 500, 0.117, 0, 0, 0),
    (17.61, 1, 62.2, 62.2, 461.2, 0.135, 0, 0, 0),
    (19.65, 1, 660, 476.8, 500, 0.954, 376, 183.2, NAN),
    (21.71, 1, 594.2, 494.2, 500, 0.988, 579, 100, NAN),
    (23.82, 1, 730.8, 490.6, 500, 0.981, 1080, 240.2, NAN),
    (25.86, 1, 794.1, 486.8, 500, 0.974, 1721, 307.3, NAN),
    (27.95, 1, 594.7, 435.2, 437.9, 0.994, 2049, 159.4, NAN),
    (29.98, 1, 677.6, 495.4, 500, 0.991, 2426, 182.2, NAN),
    (32.05, 1, 711.2, 496.6, 500, 0.993, 2863, 214.6, NAN),
    (38.88, 1, 656.6, 424.2, 500, 0.848, 4449, 232.4, NAN),
    (40.92, 2, 963.7, 985.3, 500, 0.985, 4404, -21.7, NAN),
    (43.01, 2, 731.3, 983.5, 500, 0.984, 3888, -252.2, NAN),
    (45.04, 2, 717.4, 992.8, 500, 0.993, 3314, -275.4, NAN),
    (47.11, 2, 648.9, 887.1, 445.6, 0.995, 2831, -238.2, NAN),
    (49.17, 2, 699.5, 991.3, 500, 0.991, 2227, -291.8, NAN),
    (51.34, 2, 703.2, 971.2, 500, 0.971, 1676, -268, NAN),
    (53.39, 2, 720.3, 951.3, 500, 0.951, 1173, -231, NAN),
    (55.43, 2, 794.2, 909.2, 500, 0.909, 938, -115, NAN),
    (57.55, 2, 571.3, 791.8, 462.3, 0.863, 483, -220.5, 0),
    (59.59, 2, 698.7, 840, 500, 0.84, 186, -141.3, 0),
    (61.64, 2, 0, 62.2, 500, 0.062, 0, -91.5, 0),
    (63.66, 2, 59.9, 59.9, 165.6, 0.201, 0, 0, 0),
    (65.71, 2, 58.6, 58.6, 500, 0.059, 0, 0, 0),
    (67.8, 2, 59.4, 57.5, 292.3, 0.129, 4, 1.9, 0),
    (70.42, 1, 29, 30.5, 500, 0.061, 0, -1.5, 0),
    (72.47, 1, 30.3, 30.3, 217.6, 0.139, 0, 0, 0),
    (74.61, 1, 83.7, 83.7, 500, 0.167, 0, 0, 0),
    (76.66, 1, 59.4, 58, 500, 0.116, 3, 1.4, 0),
    (78.73, 1, 36.8, 11.5, 14.5, 0.791, 55, 25.3, NAN),
]
"""The sensor's snapshots of a closed-loop run (test_autoscale_closed_loop.py) on a loaded
machine: 60 msg/s, a step to 700, 1 -> 2 workers, back to 60, 2 -> 1; then, 8 s after the
scale-down, the one worker's last status second was mostly a checkpoint of its six tasks (0.8 s,
one task's 0.54 s): 11.5 msg/s at utilisation 0.79, a true rate of 14.5 msg per busy-second."""


def test_one_stalled_status_interval_does_not_scale_the_fleet_back_up(monkeypatch) -> None:
    """Taken alone as the worker's rate, that reading made the plan 1 -> 3 (predicted cost 520
    against 0.03): the run failed "scaled back up". Weighted by busy time it is one of many."""
    for key, value in AUTOSCALE_ENV.items():
        monkeypatch.setenv(key, value)
    policy = MctsPolicy(load_settings(AutoscaleSettings))
    snapshots = [FleetMetrics(at, workers, 6, *figures) for at, workers, *figures in STALLED_RUN]
    *history, stalled = snapshots
    before = policy.worker_rate(history[-1], history[:-1])
    assert stalled.utilisation >= 0.5 and stalled.true_processing_rate < 0.05 * before
    assert policy.worker_rate(stalled, history) > 0.9 * before
    decision = policy.decide(stalled, history)
    assert decision.target == 1, decision.reason


def test_the_planner_goes_past_the_partitions_only_when_they_can_be_split() -> None:
    """4 partitions, 5,000 msg/s against 1,000 per worker: whole partitions cap the fleet at
    4 workers (and lag); with up to 4 buckets per partition it plans more workers within its
    first two steps (it may wait one step: a split stops every task for its 60 s pause)."""
    planner = MctsPlanner(MctsSettings())
    whole = problem(workers=4, partitions=4, rate=5000.0, backlog=0.0, sla_s=60.0)
    assert whole.upper == 4
    assert max(s.workers for s in planner.plan(whole).segments) == 4
    split = replace(whole, max_factor=4)
    assert split.upper == 16
    assert planner.children(4, 1, 16, 4, max_factor=4)[-1] == 16
    soon = [s.workers for s in planner.plan(split).segments if s.start_s < 2 * split.step_s]
    assert max(soon) >= 6, soon


def test_a_rescale_that_splits_or_merges_key_buckets_pauses_every_task_per_step() -> None:
    """4 partitions, up to 4 buckets each: 4 -> 8 workers splits once (factor 1 -> 2), 4 -> 16
    twice; each step stops every task once, on top of the moves. Without buckets, nothing
    changes. The planner's matrix and the simulator use the same price."""
    assert rebucketing_steps(4, 8, 4, max_factor=4) == 1
    assert rebucketing_steps(4, 16, 4, max_factor=4) == 2 == rebucketing_steps(16, 4, 4, 4)
    assert rebucketing_steps(1, 2, 4, max_factor=4) == 0  # both whole partitions
    assert rebucketing_steps(4, 16, 4) == 0
    moves = float(fleet_pause_s(4, 16, 4, 2.0))
    assert rescale_loss_s(4, 16, 4, 2.0, max_factor=4) == pytest.approx(moves + 2 * 2.0)
    assert rescale_loss_s(4, 16, 4, 2.0) == pytest.approx(moves)
    counts = np.arange(17)
    matrix = rescale_loss_s(counts[:, None], counts[None, :], 4, 2.0, 0.0, 4)
    assert matrix[4, 16] == pytest.approx(moves + 4.0) and matrix[16, 16] == 0.0
