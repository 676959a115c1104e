"""The spot-interruption sensor: notices from an SQS queue become evacuation runs.

EventBridge rules and Auto Scaling lifecycle hooks put AWS's notices on the queue
(``SLUICE_SPOT_QUEUE_URL``; ``docs/spot.md`` wires them). Each tick reads up to ten messages
and parses them (:mod:`orchestration.control_plane.fleet.notices`):

- a notice becomes a run of ``evacuate_instance`` whose run key is the instance and the kind
  of notice, so a notice delivered twice (SQS is at-least-once, and an interruption warning
  is often followed by a state change) acts once. The message is made visible again at once
  and deleted on the tick after, when the cursor that records it has been committed with the
  run request: a crash between the two acts at most once more, never loses a notice;
- a message that needs no action (a test notification, a launch) is deleted;
- a message that is not a notice is logged, counted and moved to
  ``SLUICE_SPOT_DEAD_LETTER_QUEUE_URL`` with its reason (or left to the queue's redrive
  policy when that is unset); it never fails the tick.
"""

from __future__ import annotations

import json

import dagster as dg

from orchestration.control_plane.fleet.notices import InterruptionNotice, NoticeError, parse_notice
from orchestration.control_plane.settings import SpotSettings
from pipelines.settings import load_settings

__all__ = ["SPOT_SENSOR", "make_spot_interruption_sensor", "notice_run_request"]

SPOT_SENSOR = "spot_interruption_sensor"
SEEN_KEPT = 1000


def notice_run_request(notice: InterruptionNotice, wait_s: float) -> dg.RunRequest:
    config = {
        "instance_id": notice.instance_id,
        "kind": notice.kind,
        "reason": f"{notice.detail or notice.kind} notice of {notice.time}",
        "wait_s": wait_s,
    }
    if notice.lifecycle is not None:
        config |= {
            "lifecycle_hook": notice.lifecycle.hook,
            "lifecycle_group": notice.lifecycle.group,
            "lifecycle_token": notice.lifecycle.token,
        }
    return dg.RunRequest(
        run_key=notice.key,
        run_config={"ops": {"evacuate_instance_op": {"config": config}}},
        tags={"sluice/instance": notice.instance_id, "sluice/notice": notice.kind},
    )


def make_spot_interruption_sensor(
    job: dg.JobDefinition, settings: SpotSettings | None = None
) -> dg.SensorDefinition:
    @dg.sensor(
        name=SPOT_SENSOR,
        job=job,
        minimum_interval_seconds=10,
        description="Reads AWS's interruption, rebalance, state-change and lifecycle notices "
        "from SQS and starts an evacuation run per instance and notice kind.",
    )
    def spot_interruption_sensor(context: dg.SensorEvaluationContext):
        spot = settings or load_settings(SpotSettings)
        if not spot.queue_url:
            return dg.SkipReason("SLUICE_SPOT_QUEUE_URL is not set: no queue to read")
        import boto3

        sqs = boto3.client("sqs", region_name=spot.region, endpoint_url=spot.endpoint_url)
        cursor = json.loads(context.cursor) if context.cursor else {}
        seen: list[str] = cursor.get("seen", [])
        counts: dict[str, int] = cursor.get("counts", {})
        messages = sqs.receive_message(
            QueueUrl=spot.queue_url, MaxNumberOfMessages=spot.max_messages, WaitTimeSeconds=0
        ).get("Messages", [])
        requests = []
        for message in messages:
            handle = message["ReceiptHandle"]
            try:
                notice = parse_notice(message["Body"])
            except NoticeError as exc:
                counts["bad"] = counts.get("bad", 0) + 1
                context.log.warning("message %s is not a notice: %s", message["MessageId"], exc)
                if spot.dead_letter_queue_url:
                    sqs.send_message(
                        QueueUrl=spot.dead_letter_queue_url,
                        MessageBody=message["Body"],
                        MessageAttributes={
                            "reason": {"DataType": "String", "StringValue": str(exc)[:256]}
                        },
                    )
                    sqs.delete_message(QueueUrl=spot.queue_url, ReceiptHandle=handle)
                continue
            if notice is None:
                counts["ignored"] = counts.get("ignored", 0) + 1
                sqs.delete_message(QueueUrl=spot.queue_url, ReceiptHandle=handle)
                continue
            if notice.key in seen:  # acted on in an earlier, committed tick
                sqs.delete_message(QueueUrl=spot.queue_url, ReceiptHandle=handle)
                continue
            seen.append(notice.key)
            counts["notices"] = counts.get("notices", 0) + 1
            context.log.info("%s notice for %s", notice.kind, notice.instance_id)
            requests.append(notice_run_request(notice, spot.evacuation_wait_s))
            sqs.change_message_visibility(
                QueueUrl=spot.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
            )
        new_cursor = json.dumps({"seen": seen[-SEEN_KEPT:], "counts": counts})
        if not requests:
            return dg.SensorResult(
                skip_reason=f"{len(messages)} messages, no new notice (so far {counts})",
                cursor=new_cursor,
            )
        return dg.SensorResult(run_requests=requests, cursor=new_cursor)

    return spot_interruption_sensor
