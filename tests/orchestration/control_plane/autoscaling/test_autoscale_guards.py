from __future__ import annotations

from autoscale_builders import snapshot

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.vetoes import (
    BoundsGuard,
    CooldownGuard,
    GuardContext,
    HysteresisGuard,
    apply_guards,
    default_guards,
)
from orchestration.sensors.autoscaler import with_live_bucket_factor


def up(target: int) -> ScalingDecision:
    return ScalingDecision(target, "policy says so", "p", current=4)


def test_bounds_clamp_and_say_why() -> None:
    verdict = BoundsGuard(2, 10).review(up(50), snapshot(), GuardContext(now=0.0))
    assert verdict.decision.target == 10  # partitions of the snapshot: 16, max 10
    assert verdict.guard == "bounds" and "50" in (verdict.reason or "")
    assert not BoundsGuard(2, 10).review(up(6), snapshot(), GuardContext(now=0.0)).vetoed


def test_cooldown_vetoes_a_rescale_too_soon() -> None:
    guard = CooldownGuard(300.0)
    soon = guard.review(up(6), snapshot(), GuardContext(now=1000.0, last_rescale_at=900.0))
    assert soon.vetoed and not soon.decision.is_change
    assert "100 s ago < 300 s" in (soon.reason or "")
    later = guard.review(up(6), snapshot(), GuardContext(now=1300.0, last_rescale_at=900.0))
    assert not later.vetoed and later.decision.target == 6


def test_hysteresis_vetoes_small_moves() -> None:
    guard = HysteresisGuard(1)
    assert guard.review(up(5), snapshot(), GuardContext(now=0.0)).vetoed
    assert not guard.review(up(6), snapshot(), GuardContext(now=0.0)).vetoed


def test_chain_stops_at_the_first_veto(settings: AutoscaleSettings) -> None:
    s = settings.updated(guards={"cooldown_s": 600.0, "hysteresis_workers": 2})
    verdict = apply_guards(
        up(5), snapshot(), default_guards(s), GuardContext(now=100.0, last_rescale_at=0.0)
    )
    assert verdict.guard == "cooldown"
    assert verdict.decision.target == 4


def test_bounds_allow_more_workers_than_partitions_only_up_to_their_buckets() -> None:
    whole = BoundsGuard(1, 100).review(up(50), snapshot(), GuardContext(now=0.0))
    assert whole.decision.target == 16  # the snapshot's 16 partitions
    split = BoundsGuard(1, 100, max_factor=2).review(up(50), snapshot(), GuardContext(now=0.0))
    assert split.decision.target == 32
    settings = AutoscaleSettings.model_validate({"fleet": {"max_bucket_factor": 4}})
    assert default_guards(settings)[0].max_factor == 4


def test_the_live_sensor_sizes_with_the_fleets_bucket_factor() -> None:
    settings = with_live_bucket_factor(AutoscaleSettings(), 8)
    assert settings.fleet.max_bucket_factor == 8 and settings.fleet.upper == 288 * 8
