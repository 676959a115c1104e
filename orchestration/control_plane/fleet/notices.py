"""AWS's notices that an instance is about to go, as they arrive on an SQS queue.

EventBridge rules forward four kinds of event to the queue (``docs/spot.md`` wires them):
"EC2 Spot Instance Interruption Warning" (two minutes ahead), "EC2 Instance Rebalance
Recommendation" (earlier, at elevated risk), "EC2 Instance State-change Notification"
(stopping, shutting-down: already going) and the Auto Scaling lifecycle hook's
"EC2 Instance-terminate Lifecycle Action" (the instance waits for us to complete the
action). An Auto Scaling group can also send the lifecycle hook's own message to the queue
directly. :func:`parse_notice` reads any of them; a message it cannot read raises
:class:`NoticeError` with the reason (the sensor dead-letters it), and one that needs no
action (a test notification, a state change to running) gives None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipelines.exceptions import SluiceError

__all__ = ["InterruptionNotice", "LifecycleAction", "NoticeError", "parse_notice"]

GOING_STATES = ("stopping", "stopped", "shutting-down", "terminated")


class NoticeError(SluiceError):
    """A queue message that is not a notice Sluice can act on; the message says why."""


@dataclass(frozen=True)
class LifecycleAction:
    """What completing an Auto Scaling lifecycle action needs."""

    hook: str
    group: str
    token: str


@dataclass(frozen=True)
class InterruptionNotice:
    kind: str
    """``interruption``, ``rebalance``, ``terminating`` (lifecycle hook) or ``stopping``."""
    instance_id: str
    time: str
    """When AWS sent it (ISO 8601)."""
    detail: str = ""
    lifecycle: LifecycleAction | None = None

    @property
    def key(self) -> str:
        """One action per instance and kind, however often the notice is delivered."""
        return f"{self.kind}:{self.instance_id}"


def _require(mapping: dict[str, Any], name: str, where: str) -> Any:
    value = mapping.get(name)
    if not value:
        raise NoticeError(f"{where} has no {name!r}")
    return value


def _from_event(event: dict[str, Any]) -> InterruptionNotice | None:
    kind = event["detail-type"]
    detail = event.get("detail") or {}
    if not isinstance(detail, dict):
        raise NoticeError(f"{kind!r} event has a detail that is not an object")
    at = str(event.get("time", ""))
    if kind == "EC2 Spot Instance Interruption Warning":
        instance = _require(detail, "instance-id", kind)
        action = detail.get("instance-action", "terminate")
        return InterruptionNotice("interruption", instance, at, f"spot {action}")
    if kind == "EC2 Instance Rebalance Recommendation":
        return InterruptionNotice("rebalance", _require(detail, "instance-id", kind), at)
    if kind == "EC2 Instance State-change Notification":
        state = _require(detail, "state", kind)
        if state not in GOING_STATES:
            return None
        return InterruptionNotice("stopping", _require(detail, "instance-id", kind), at, state)
    if kind == "EC2 Instance-terminate Lifecycle Action":
        return _lifecycle(detail, at, kind)
    raise NoticeError(f"unknown event type {kind!r}")


def _lifecycle(detail: dict[str, Any], at: str, where: str) -> InterruptionNotice | None:
    if detail.get("Event") == "autoscaling:TEST_NOTIFICATION":
        return None
    transition = detail.get("LifecycleTransition")
    if transition != "autoscaling:EC2_INSTANCE_TERMINATING":
        if transition:
            return None  # a launching hook: nothing to move
        raise NoticeError(f"{where} has no 'LifecycleTransition'")
    action = LifecycleAction(
        hook=_require(detail, "LifecycleHookName", where),
        group=_require(detail, "AutoScalingGroupName", where),
        token=_require(detail, "LifecycleActionToken", where),
    )
    instance = _require(detail, "EC2InstanceId", where)
    return InterruptionNotice("terminating", instance, at, "lifecycle hook", action)


def parse_notice(body: str) -> InterruptionNotice | None:
    """The notice in an SQS message body (an EventBridge event or a lifecycle hook message)."""
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise NoticeError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise NoticeError("not a JSON object")
    if "detail-type" in message:
        return _from_event(message)
    if "LifecycleTransition" in message or message.get("Event") == "autoscaling:TEST_NOTIFICATION":
        return _lifecycle(message, str(message.get("Time", "")), "lifecycle hook message")
    raise NoticeError("neither an EventBridge event nor a lifecycle hook message")
