"""Each policy on hand-built situations; every one of them must survive NaN inputs."""

from __future__ import annotations

import logging
import math

import pytest
from autoscale_builders import snapshot

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.decision import ScalingDecision
from orchestration.control_plane.autoscaling.exceptions import UnknownPolicy
from orchestration.control_plane.autoscaling.metrics import FleetMetrics, Metric
from orchestration.control_plane.autoscaling.policies import (
    POLICIES,
    Ds2Policy,
    KedaPolicy,
    ScalingPolicy,
    StaticPolicy,
    ThresholdPolicy,
    make_policy,
)


def test_registry_builds_every_policy_under_its_name(settings: AutoscaleSettings) -> None:
    assert list(POLICIES) == ["static", "threshold", "ds2", "keda", "mcts", "horizon"]
    for name in POLICIES:
        policy = make_policy(name, settings)
        assert isinstance(policy, ScalingPolicy)
        assert policy.name == name
    with pytest.raises(UnknownPolicy, match="'nope'"):
        make_policy("nope", settings)


@pytest.mark.parametrize("name", [n for n in POLICIES if n != "static"])
def test_nan_inputs_give_no_change_with_a_warning(
    name: str, settings: AutoscaleSettings, caplog: pytest.LogCaptureFixture
) -> None:
    policy = make_policy(name, settings)
    nan = math.nan
    metrics = snapshot(
        input_rate=nan, processing_rate=nan, utilisation=nan, backlog=nan, backlog_growth=nan
    )
    with caplog.at_level(logging.WARNING):
        decision = policy.decide(metrics, [])
    assert not decision.is_change
    assert decision.target == 4
    assert "missing" in decision.reason
    assert any("missing" in r.getMessage() for r in caplog.records)


def test_decision_sentinel() -> None:
    same = ScalingDecision.no_change(5, "steady", "p")
    assert not same.is_change and same.target == 5
    assert ScalingDecision(6, "up", "p", current=5).is_change


def test_fleet_metrics_missing_is_nan_aware() -> None:
    m = FleetMetrics(time=0.0, workers=1, partitions=1, input_rate=math.inf)
    assert m.missing(Metric.INPUT_RATE, Metric.BACKLOG) == [Metric.INPUT_RATE, Metric.BACKLOG]
    assert Metric.TIME_LAG.unit == "s"


def test_static_sizes_for_the_peak(settings: AutoscaleSettings) -> None:
    policy = StaticPolicy.from_settings(settings)
    assert policy.workers == 32  # 32000 msg/s at 1000 per worker over 288 partitions
    assert policy.decide(snapshot(workers=3), []).target == 32
    assert not policy.decide(snapshot(workers=32), []).is_change


class TestThreshold:
    def policy(self, settings: AutoscaleSettings) -> ThresholdPolicy:
        return ThresholdPolicy.from_settings(settings)

    def test_growing_backlog_sizes_to_keep_up_and_catch_up(
        self, settings: AutoscaleSettings
    ) -> None:
        # 4 workers process 4000 msg/s, backlog grows 2000 msg/s, 600k backlog = 150 s drain
        m = snapshot(
            processing_rate=4000.0, utilisation=1.0, backlog=600_000.0, backlog_growth=2000.0
        )
        d = self.policy(settings).decide(m, [])
        # W_req = 4 * 6000/4000 = 6; W_extra = 4 * 150 / 300 = 2
        assert d.target == 8
        assert "scale up" in d.reason

    def test_hot_cpu_without_backlog_scales_up(self, settings: AutoscaleSettings) -> None:
        d = self.policy(settings).decide(snapshot(utilisation=0.95), [])
        assert d.target == 5  # ceil(4 * 0.95 / 0.8)

    def test_scale_down_from_cpu_alone(self, settings: AutoscaleSettings) -> None:
        d = self.policy(settings).decide(snapshot(workers=10, utilisation=0.3), [])
        assert d.target == 4  # ceil(10 * 0.3 / 0.8)

    def test_no_scale_down_while_backlog_grows(self, settings: AutoscaleSettings) -> None:
        m = snapshot(workers=10, utilisation=0.3, backlog=1000.0, backlog_growth=5.0)
        assert not self.policy(settings).decide(m, []).is_change

    def test_inside_thresholds_holds(self, settings: AutoscaleSettings) -> None:
        assert not self.policy(settings).decide(snapshot(utilisation=0.8), []).is_change


class TestDs2:
    def test_sizes_from_true_rate_at_target_utilisation(self, settings: AutoscaleSettings) -> None:
        s = settings.updated(ds2={"align_to_partitions": False})
        policy = Ds2Policy.from_settings(s)
        # 2 workers at 100%: 3000 msg/s needs 3000 * (1 + 60/1800) / (1000 * 0.6) -> 6
        m = snapshot(workers=2, input_rate=3000.0, utilisation=1.0, backlog_growth=1000.0)
        assert policy.decide(m, []).target == 6

    def test_aligns_to_a_divisor_of_the_partitions(self, settings: AutoscaleSettings) -> None:
        policy = Ds2Policy.from_settings(settings)
        m = snapshot(workers=2, partitions=16, input_rate=3000.0, backlog_growth=1000.0)
        assert policy.decide(m, []).target == 8  # 6 -> next divisor of 16

    def test_catches_up_the_lag(self, settings: AutoscaleSettings) -> None:
        s = settings.updated(ds2={"align_to_partitions": False})
        m = snapshot(workers=2, input_rate=3000.0, backlog=1_800_000.0, backlog_growth=1000.0)
        # + 1000 msg/s to drain the lag in 1800 s
        assert Ds2Policy.from_settings(s).decide(m, []).target == 7

    def test_scale_down_waits_for_the_interval(self, settings: AutoscaleSettings) -> None:
        s = settings.updated(ds2={"align_to_partitions": False, "scale_down_interval_s": 3600})
        policy = Ds2Policy.from_settings(s)
        busy = snapshot(time=0.0, workers=8, input_rate=4500.0, backlog_growth=1.0)
        assert policy.decide(busy, []).target == 8
        quiet = snapshot(time=1800.0, workers=8, input_rate=500.0)
        assert not policy.decide(quiet, []).is_change  # 8 was asked for 30 min ago
        later = snapshot(time=7200.0, workers=8, input_rate=500.0)
        assert policy.decide(later, []).target == 1

    def test_unknown_true_rate_uses_history_then_holds(self, settings: AutoscaleSettings) -> None:
        policy = Ds2Policy.from_settings(settings)
        now = snapshot(workers=2, input_rate=3000.0, true_processing_rate=math.nan)
        assert not policy.decide(now, []).is_change
        assert policy.decide(now, [snapshot()]).is_change


class TestKeda:
    @pytest.fixture
    def settings(self, settings: AutoscaleSettings) -> AutoscaleSettings:
        """A lag threshold of 60 s at the builders' 1,000 msg/s workers."""
        return settings.model_copy(
            update={"keda": settings.keda.model_copy(update={"lag_threshold": 60_000.0})}
        )

    def test_replicas_are_lag_over_threshold(self, settings: AutoscaleSettings) -> None:
        policy = KedaPolicy.from_settings(settings)
        assert policy.decide(snapshot(workers=1, backlog=250_000.0), []).target == 5

    def test_capped_at_partitions(self, settings: AutoscaleSettings) -> None:
        policy = KedaPolicy.from_settings(settings)
        assert policy.decide(snapshot(workers=1, backlog=1e12), []).target == 16

    def test_scale_down_is_stabilised(self, settings: AutoscaleSettings) -> None:
        policy = KedaPolicy.from_settings(settings)
        assert policy.decide(snapshot(time=0.0, workers=1, backlog=500_000.0), []).target == 9
        calm = policy.decide(snapshot(time=120.0, workers=9, backlog=0.0), [])
        assert not calm.is_change
        later = policy.decide(snapshot(time=600.0, workers=9, backlog=0.0), [])
        assert later.target == 1
