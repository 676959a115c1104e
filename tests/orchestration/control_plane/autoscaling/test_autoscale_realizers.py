"""Realizers: the simulated one, and the AWS one against a moto server on a free port."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from orchestration.control_plane.autoscaling.config import AutoscaleSettings, AwsSettings
from orchestration.control_plane.autoscaling.exceptions import RealizerError, ScalingTimeout
from orchestration.control_plane.autoscaling.realizers import (
    AwsAutoScalingRealizer,
    Realizer,
    SimulatedRealizer,
    StartClock,
    with_measured_start,
)
from tests.fixtures.moto import auto_scaling_group, aws_test_credentials


def test_simulated_realizer_records_rescales() -> None:
    clock = iter([10.0, 20.0])
    realizer = SimulatedRealizer(3, clock=lambda: next(clock))
    assert isinstance(realizer, Realizer)
    assert realizer.apply(3, "same") == 3 and realizer.events == []
    assert realizer.apply(5, "up") == 5
    assert realizer.current() == 5
    assert [(e.time, e.before, e.after) for e in realizer.events] == [(10.0, 3, 5)]
    with pytest.raises(RealizerError, match="-1"):
        realizer.apply(-1, "bad")


@pytest.fixture
def group(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsSettings]:
    aws_test_credentials(monkeypatch)
    with auto_scaling_group(moto_endpoint) as settings:
        yield settings


def test_aws_realizer_sets_desired_capacity_and_waits_for_in_service(group: AwsSettings) -> None:
    realizer = AwsAutoScalingRealizer(group)
    assert isinstance(realizer, Realizer)
    assert realizer.current() == 1
    assert realizer.apply(4, "load is up") == 4
    assert realizer.current() == 4
    assert realizer.in_service() == 4
    assert realizer.apply(2, "load is down") == 2
    assert realizer.in_service() == 2


def test_aws_realizer_measures_how_long_a_scale_out_takes_to_start(group: AwsSettings) -> None:
    realizer = AwsAutoScalingRealizer(group.model_copy(update={"instance_start_s": 240.0}))
    settings = AutoscaleSettings()
    # before any scale-out: EC2's minutes, not a local process's seconds
    assert with_measured_start(settings, realizer).fleet.scale_up_start_s == 240.0
    started = time.monotonic()
    realizer.apply(3, "load is up")
    took = time.monotonic() - started
    assert realizer.start_clock.measured and 0.0 <= realizer.start_clock.measured[0] <= took
    realizer.apply(2, "load is down")  # a scale-in starts nothing
    assert len(realizer.start_clock.measured) == 1
    measured = with_measured_start(settings, realizer).fleet.scale_up_start_s
    assert measured == realizer.start_clock.measured[0]
    # the simulator's realizer measures nothing: the configured start stands
    simulated = SimulatedRealizer(1)
    assert with_measured_start(settings, simulated).fleet.scale_up_start_s == 5.0


def test_the_start_clock_is_the_median_of_the_recent_starts() -> None:
    clock = StartClock(default_s=180.0, keep=3)
    assert clock.start_s() == 180.0
    for seconds in (400.0, 90.0, 100.0, 110.0):
        clock.record(seconds, 1, "group g")
    assert clock.measured == [90.0, 100.0, 110.0]  # the oldest forgotten
    assert clock.start_s() == 100.0


def test_aws_realizer_refuses_targets_outside_the_group(group: AwsSettings) -> None:
    realizer = AwsAutoScalingRealizer(group)
    with pytest.raises(RealizerError, match=r"target 9 outside .* \[1, 8\]"):
        realizer.apply(9, "too many")
    assert realizer.current() == 1


def test_aws_realizer_unknown_group_is_a_clear_error(
    moto_endpoint: str, group: AwsSettings
) -> None:
    realizer = AwsAutoScalingRealizer(group.model_copy(update={"group_name": "nope"}))
    with pytest.raises(RealizerError, match="'nope' not found"):
        realizer.current()


def test_aws_realizer_times_out_when_instances_never_come(group: AwsSettings) -> None:
    class Stuck:
        """A client whose instances never leave Pending."""

        def describe_auto_scaling_groups(self, **_: object) -> dict:
            return {
                "AutoScalingGroups": [
                    {
                        "DesiredCapacity": 3,
                        "MinSize": 1,
                        "MaxSize": 8,
                        "Instances": [{"LifecycleState": "Pending", "HealthStatus": "Healthy"}],
                    }
                ]
            }

        def set_desired_capacity(self, **_: object) -> None:
            return None

    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    settings = group.model_copy(update={"wait_timeout_s": 1.0, "poll_interval_s": 0.25})
    realizer = AwsAutoScalingRealizer(settings, client=Stuck(), sleep=sleep, clock=lambda: now[0])
    with pytest.raises(ScalingTimeout, match="0 of 3 instances InService"):
        realizer.apply(3, "up")


def test_completing_a_lifecycle_action_matches_the_aws_api() -> None:
    """moto has no CompleteLifecycleAction: the request is checked against botocore's model
    of the API (parameter names and types), and a refusal is a clear error."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.client(
        "autoscaling",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    realizer = AwsAutoScalingRealizer(AwsSettings(group_name="g"), client=client)
    expected = {
        "LifecycleHookName": "sluice-drain",
        "AutoScalingGroupName": "g",
        "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
        "LifecycleActionResult": "CONTINUE",
        "InstanceId": "i-0abc",
    }
    with Stubber(client) as stub:
        stub.add_response("complete_lifecycle_action", {}, expected)
        realizer.complete_lifecycle(
            "sluice-drain", "g", "87654321-4321-4321-4321-210987654321", "i-0abc"
        )
        stub.assert_no_pending_responses()
        stub.add_client_error("complete_lifecycle_action", "ValidationError", "No active action")
        with pytest.raises(RealizerError, match="No active action"):
            realizer.complete_lifecycle(
                "sluice-drain", "g", "87654321-4321-4321-4321-210987654321", "i-0abc"
            )
