"""The optimum's programme over a forecast horizon: the `horizon` policy."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import pytest
from autoscale_builders import snapshot

from orchestration.control_plane.autoscaling.config import AutoscaleSettings, FleetSettings
from orchestration.control_plane.autoscaling.exceptions import NoFeasiblePlan
from orchestration.control_plane.autoscaling.horizon import horizon_plan
from orchestration.control_plane.autoscaling.mcts import efficient_levels
from orchestration.control_plane.autoscaling.policies import HorizonPolicy, MctsPolicy, make_policy
from orchestration.control_plane.autoscaling.simulator import Simulator, load_trace

FLEET = FleetSettings(
    partitions=8, worker_rate=1000.0, max_workers=4, move_pause_s=2.0, state_mb_per_task=0.0
)


def test_a_burst_the_backlog_can_absorb_needs_no_rescale() -> None:
    # one worker, 10 minutes at 1500 msg/s then back to 500: the oldest message waits at most
    # 300 s, so a 5-minute SLA lets the backlog absorb the burst without a rescale
    rates = [1500.0, 1500.0] + [500.0] * 10
    plan = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 300.0, rescale_price=12.0)
    assert plan.schedule == (1,) * 12 and plan.rescales == 0
    # with a 2-minute SLA it cannot: up for the burst's second half, down once it is drained
    plan = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 120.0, rescale_price=3.0)
    assert plan.schedule == (1, 2) + (1,) * 10 and plan.rescales == 2
    # unless a rescale costs more than holding the second worker to the horizon
    plan = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 120.0, rescale_price=12.0)
    assert plan.schedule == (1,) + (2,) * 11


def test_the_rescale_price_trades_worker_steps_for_rescales() -> None:
    rates = [500.0, 1800.0, 500.0, 1800.0, 500.0, 1800.0, 500.0, 500.0]
    cheap = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 300.0, rescale_price=0.0)
    dear = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 300.0, rescale_price=50.0)
    assert dear.rescales < cheap.rescales
    assert dear.worker_steps > cheap.worker_steps


def test_a_backlog_already_late_has_no_plan() -> None:
    with pytest.raises(NoFeasiblePlan):
        # 2 million messages, the oldest 10 minutes old, a 5-minute SLA: late whatever runs
        horizon_plan(FLEET, 1, 2e6, 600.0, [500.0] * 4, 300.0, 300.0, rescale_price=1.0)


def test_the_horizon_search_keeps_the_sla_on_a_shipped_trace(settings: AutoscaleSettings) -> None:
    s = settings.updated(simulation={"days": 0.5})
    result = Simulator(load_trace("elb_request_count_8c0756"), s).run(make_policy("horizon", s))
    summary = result.summary()
    assert summary.sla_violation_minutes == 0
    assert any("horizon plan" in r.reason for r in result.records)
    # every decision either planned over the horizon or fell back to the tree, never crashed
    assert all(r.reason.startswith(("horizon plan", "plan:")) for r in result.records[1:])


def plan_cost(schedule: Sequence[int], start: int, price: float, per_worker: float) -> float:
    """What the programme minimises: worker-steps and each rescale's price."""
    moves = [b for a, b in zip([start, *schedule], schedule, strict=False) if a != b]
    return sum(schedule) + len(moves) * price + per_worker * sum(moves)


def test_capping_the_counts_at_twice_the_peak_loses_no_plan(settings: AutoscaleSettings) -> None:
    """The policy offers the programme only counts up to the one carrying twice the forecast
    peak (a decision in milliseconds); on a shipped trace's decisions, the plan it finds costs
    what the programme over every efficient count finds."""
    s = settings.updated(simulation={"days": 0.25})
    policy = make_policy("horizon", s)
    seen: list[tuple] = []

    class Recording:
        name = "horizon"

        def decide(self, metrics, history):
            seen.append((metrics, list(history)))
            return policy.decide(metrics, history)

    Simulator(load_trace("elb_request_count_8c0756"), s).run(Recording())
    m = s.mcts
    compared = 0
    for metrics, history in seen[1::6]:
        p = policy.problem(metrics, history)
        decision = policy.first_move(metrics, p)
        if decision is None:
            continue
        price = decision.explanation["rescale_price_worker_steps"]
        per_worker = decision.explanation["rescale_price_per_worker_steps"]
        floor = min(p.down_floor, metrics.workers) if p.down_floor > 0 else 0
        every = [c for c in efficient_levels(p.partitions, 1, p.upper) if c >= floor]
        fleet = s.fleet.model_copy(
            update={
                "worker_rate": p.worker_rate,
                "move_pause_s": p.task_pause_s,
                "move_pause_per_state_mb_s": 0.0,
            }
        )
        full = horizon_plan(
            fleet,
            metrics.workers,
            p.backlog,
            metrics.time_lag,
            p.rates,
            p.step_s,
            s.simulation.sla_s * m.sla_safety,
            price,
            per_worker,
            counts=every,
        )

        costs = [
            plan_cost(schedule, metrics.workers, price, per_worker)
            for schedule in (decision.explanation["schedule"], full.schedule)
        ]
        assert costs[0] == pytest.approx(costs[1])
        compared += 1
    assert compared >= 5


def test_the_per_worker_price_charges_each_rescale_by_its_new_count() -> None:
    rates = [1500.0, 1500.0] + [500.0] * 10
    # up to 2 and back to 1 costs 2 + 1 = 3 x the per-worker price; holding 2 costs 10 steps
    cheap = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 120.0, 0.0, rescale_price_per_worker=1.0)
    assert cheap.schedule == (1, 2) + (1,) * 10
    # at 12 a worker-step per worker, up and down (36) cost more than up (24) and holding (10)
    dear = horizon_plan(FLEET, 1, 0.0, 0.0, rates, 300.0, 120.0, 0.0, rescale_price_per_worker=12.0)
    assert dear.schedule == (1,) + (2,) * 11


def test_the_deprecated_mcts_search_setting_runs_the_horizon_policy(
    settings: AutoscaleSettings,
) -> None:
    """`mcts` with `mcts.search = "horizon"` was the horizon search before it was a policy:
    it still is, with a warning naming the setting that replaces it."""
    old = settings.updated(simulation={"days": 0.25}, mcts={"search": "horizon"})
    with pytest.warns(FutureWarning, match="SLUICE_AUTOSCALE_POLICY=horizon"):
        policy = make_policy("mcts", old)
    assert isinstance(policy, HorizonPolicy)
    new = settings.updated(simulation={"days": 0.25})
    trace = load_trace("elb_request_count_8c0756")
    runs = [
        Simulator(trace, s).run(p) for s, p in ((old, policy), (new, make_policy("horizon", new)))
    ]
    assert [(r.workers, r.reason) for r in runs[0].records] == [
        (r.workers, r.reason) for r in runs[1].records
    ]


def test_horizon_is_a_policy_the_settings_accept(settings: AutoscaleSettings) -> None:
    assert AutoscaleSettings(policy="horizon").policy == "horizon"
    assert isinstance(make_policy("horizon", settings), HorizonPolicy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(make_policy("mcts", settings), MctsPolicy)  # the tree, no warning


def test_the_horizon_policy_plans_on_the_measured_partitions(
    settings: AutoscaleSettings,
) -> None:
    """The programme sees the fleet the tree search sees: the partitions the workers report,
    not the configured ones (3 workers carry 3000 msg/s over 288 partitions, 2667 over 16)."""
    s = settings.updated(fleet={"worker_rate": 1000.0}, mcts={"use_forecast": False})
    steady = dict(
        workers=3,
        partitions=16,
        input_rate=2800.0,
        processing_rate=2800.0,
        true_processing_rate=1000.0,
        utilisation=0.93,
    )
    history = [snapshot(time=t, **steady) for t in range(0, 3600, 60)]
    policy = make_policy("horizon", s)
    decision = policy.decide(snapshot(time=3600.0, **steady), history)
    assert decision.explanation["search"] == "horizon"
    assert max(decision.explanation["schedule"]) >= 4
