"""Pareto marks: dominated only by a policy no worse on all three counts and better on one."""

from __future__ import annotations

from orchestration.control_plane.autoscaling.evaluation.pareto import dominated_by, dominates
from orchestration.control_plane.autoscaling.simulator import PolicySummary


def summary(policy: str, worker_hours: float, rescales: int, sla_minutes: float) -> PolicySummary:
    return PolicySummary(
        policy=policy,
        trace="t",
        worker_hours=worker_hours,
        savings_vs_static=1.0,
        mean_utilisation=0.5,
        sla_violation_minutes=sla_minutes,
        max_lag_s=0.0,
        rescales=rescales,
        rescales_per_day=float(rescales),
        pause_minutes=0.0,
        decision_mean_ms=0.0,
        decision_p99_ms=0.0,
        mean_workers=1.0,
        max_workers=1,
    )


def test_a_policy_better_on_one_count_and_equal_on_the_others_dominates() -> None:
    a = summary("a", 100.0, 10, 0.0)
    assert dominates(a, summary("b", 100.0, 11, 0.0))
    assert dominates(a, summary("b", 101.0, 10, 0.0))
    assert dominates(a, summary("b", 100.0, 10, 0.5))
    assert not dominates(a, summary("same", 100.0, 10, 0.0))


def test_a_trade_leaves_both_on_the_front() -> None:
    marks = dominated_by(
        [
            summary("cheap", 100.0, 30, 0.0),  # fewer worker-hours, more rescales
            summary("calm", 110.0, 5, 0.0),  # the other way round
            summary("worse", 120.0, 30, 0.0),  # beaten by both
            summary("late", 90.0, 1, 3.0),  # cheapest and calmest, but late
        ]
    )
    assert marks == {"cheap": [], "calm": [], "worse": ["cheap", "calm"], "late": []}
