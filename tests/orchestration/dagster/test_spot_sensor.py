"""The spot sensor against moto's SQS with real boto3 calls: notices in, one run per
instance and kind, handled messages deleted a tick later, garbage dead-lettered with its
reason, and a tick never fails."""

from __future__ import annotations

import json
import uuid

import boto3
import dagster as dg
import pytest

from orchestration.control_plane.settings import SpotSettings
from orchestration.jobs.recovery import evacuate_spot_instance
from orchestration.sensors.spot import make_spot_interruption_sensor
from tests.fixtures.moto import aws_test_credentials
from tests.orchestration.control_plane.fleet.test_notices import event, lifecycle


@pytest.fixture
def queues(moto_endpoint, monkeypatch):
    aws_test_credentials(monkeypatch)
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)
    name = f"spot-{uuid.uuid4().hex[:8]}"
    queue = sqs.create_queue(QueueName=name)["QueueUrl"]
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    settings = SpotSettings(queue_url=queue, dead_letter_queue_url=dlq, endpoint_url=moto_endpoint)
    return sqs, settings


def _all(sqs, url: str) -> list[dict]:
    out = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=30
    ).get("Messages", []):
        out += batch
    return out


def test_notices_become_one_run_each_and_garbage_is_dead_lettered(queues) -> None:
    sqs, settings = queues
    warning = event(
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": "i-1", "instance-action": "terminate"},
    )
    bodies = [
        warning,
        warning,  # SQS delivers at least once
        event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-2"}),
        event("EC2 Instance-terminate Lifecycle Action", lifecycle(EC2InstanceId="i-3")),
        event("EC2 Instance State-change Notification", {"instance-id": "i-4", "state": "running"}),
        json.dumps({"Event": "autoscaling:TEST_NOTIFICATION"}),
        "certainly not json",
        event("EC2 Mystery", {}),
    ]
    for body in bodies:
        sqs.send_message(QueueUrl=settings.queue_url, MessageBody=body)
    sensor = make_spot_interruption_sensor(evacuate_spot_instance, settings)
    instance = dg.DagsterInstance.ephemeral()

    context = dg.build_sensor_context(instance=instance)
    result = sensor.evaluate_tick(context)
    keys = sorted(r.run_key for r in result.run_requests)
    assert keys == ["interruption:i-1", "rebalance:i-2", "terminating:i-3"]
    config = {
        r.run_key: r.run_config["ops"]["evacuate_instance_op"]["config"]
        for r in result.run_requests
    }
    assert config["terminating:i-3"]["lifecycle_hook"] == "sluice-drain"
    assert config["interruption:i-1"]["kind"] == "interruption"
    cursor = json.loads(result.cursor)
    assert cursor["counts"] == {"notices": 3, "ignored": 2, "bad": 2}
    dead = _all(sqs, settings.dead_letter_queue_url)
    reasons = sorted(m["MessageAttributes"]["reason"]["StringValue"] for m in dead)
    assert len(reasons) == 2 and reasons[0].startswith("not JSON")
    assert "unknown event type" in reasons[1]

    # the next tick: the notices acted on are deleted, nothing runs twice
    again = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=result.cursor))
    assert not again.run_requests
    attributes = sqs.get_queue_attributes(
        QueueUrl=settings.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"

    # a notice delivered again later still acts once
    sqs.send_message(QueueUrl=settings.queue_url, MessageBody=warning)
    later = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=again.cursor))
    assert not later.run_requests


def test_without_a_queue_the_sensor_skips() -> None:
    sensor = make_spot_interruption_sensor(evacuate_spot_instance, SpotSettings())
    result = sensor.evaluate_tick(dg.build_sensor_context())
    assert "SLUICE_SPOT_QUEUE_URL" in result.skip_message
