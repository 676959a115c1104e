"""AWS's notices as they arrive on the queue: every kind Sluice acts on, what it ignores, and
clear reasons for what it cannot read."""

from __future__ import annotations

import json

import pytest

from orchestration.control_plane.fleet.notices import LifecycleAction, NoticeError, parse_notice


def event(detail_type: str, detail: dict) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "7bf73129-1428-4cd3-a780-95db273d1602",
            "detail-type": detail_type,
            "source": "aws.ec2",
            "time": "2026-11-23T10:00:00Z",
            "region": "us-east-1",
            "detail": detail,
        }
    )


def lifecycle(**overrides) -> dict:
    return {
        "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
        "AutoScalingGroupName": "sluice-agents",
        "LifecycleHookName": "sluice-drain",
        "EC2InstanceId": "i-0abc",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        **overrides,
    }


def test_every_kind_of_notice() -> None:
    spot = parse_notice(
        event(
            "EC2 Spot Instance Interruption Warning",
            {"instance-id": "i-0abc", "instance-action": "terminate"},
        )
    )
    assert (spot.kind, spot.instance_id, spot.key) == (
        "interruption",
        "i-0abc",
        "interruption:i-0abc",
    )
    assert spot.time == "2026-11-23T10:00:00Z"
    rebalance = parse_notice(event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-1"}))
    assert rebalance.kind == "rebalance"
    stopping = parse_notice(
        event(
            "EC2 Instance State-change Notification",
            {"instance-id": "i-2", "state": "shutting-down"},
        )
    )
    assert (stopping.kind, stopping.detail) == ("stopping", "shutting-down")
    hook = parse_notice(event("EC2 Instance-terminate Lifecycle Action", lifecycle()))
    assert hook.kind == "terminating"
    assert hook.lifecycle == LifecycleAction(
        "sluice-drain", "sluice-agents", "87654321-4321-4321-4321-210987654321"
    )
    direct = parse_notice(json.dumps({**lifecycle(), "Time": "2026-11-23T10:00:01Z"}))
    assert direct.kind == "terminating" and direct.instance_id == "i-0abc"


def test_what_needs_no_action() -> None:
    assert (
        parse_notice(
            event(
                "EC2 Instance State-change Notification", {"instance-id": "i-2", "state": "running"}
            )
        )
        is None
    )
    assert parse_notice(json.dumps({"Event": "autoscaling:TEST_NOTIFICATION"})) is None
    launching = lifecycle(LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING")
    assert parse_notice(json.dumps(launching)) is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hello": 1}', "neither an EventBridge event"),
        (event("EC2 Mystery", {}), "unknown event type 'EC2 Mystery'"),
        (event("EC2 Spot Instance Interruption Warning", {}), "no 'instance-id'"),
        (event("EC2 Spot Instance Interruption Warning", "x"), "not an object"),
        (json.dumps(lifecycle(LifecycleActionToken="")), "no 'LifecycleActionToken'"),
    ],
)
def test_what_cannot_be_read_says_why(body: str, reason: str) -> None:
    with pytest.raises(NoticeError, match=reason):
        parse_notice(body)
