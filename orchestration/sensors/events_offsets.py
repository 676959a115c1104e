"""Observe the ``events`` topic on every tick: log-end offsets per partition and write rate.

No run is launched: the sensor reads the broker and records an ``AssetObservation`` (with the
total as its data version) whenever the topic moved, so the catalog shows when data last
arrived and how fast. The cursor keeps the last total and its time, for the rate. A broker
that does not answer is a skipped tick with the reason, not a failed sensor.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from kafka.errors import KafkaError

from assets.constants import EVENTS_KEY
from assets.raw.events import topic_observation
from orchestration.control_plane.lag import newest_produced_timestamps
from orchestration.resources import KafkaResource
from pipelines.config import get_settings
from pipelines.exceptions import SluiceError
from pipelines.kafka import partitions_of

__all__ = ["EVENTS_SENSOR", "make_events_sensor"]

EVENTS_SENSOR = "events_offsets"


def make_events_sensor(
    *,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    clock: Callable[[], float] = time.time,
) -> dg.SensorDefinition:
    """The sensor recording an observation of ``events`` when its offsets moved."""

    @dg.sensor(
        name=EVENTS_SENSOR,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Observes the events topic: log-end offset per partition and the write "
        "rate since the last observation (no run).",
    )
    def _sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        cursor: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        topic = get_settings().topic
        try:
            bootstrap, settings = kafka.bootstrap(), kafka.client_settings()
            partitions = partitions_of(bootstrap, settings, topic)
            # the fetch's high watermark: the embedded broker's ListOffsets under-reports
            newest = newest_produced_timestamps(bootstrap, topic, partitions, settings)
        except (SluiceError, OSError, KafkaError) as exc:
            return dg.SensorResult(skip_reason=f"cannot read {topic}'s offsets: {exc}")
        if len(newest) < len(partitions):
            return dg.SensorResult(skip_reason=f"cannot read {topic}'s offsets: no answer")
        ends = {p: end for p, (end, _) in newest.items()}
        now = clock()
        total = sum(ends.values())
        if cursor.get("total") == total:
            return dg.SensorResult(skip_reason=f"{topic}: nothing written since the last tick")
        metadata = topic_observation(topic, ends, cursor or None, now)
        stamps = [ts for _, ts in newest.values() if ts is not None]
        if stamps:
            metadata["newest_record_at"] = datetime.fromtimestamp(
                max(stamps) / 1000, tz=UTC
            ).isoformat(timespec="seconds")
        # no data version: the realtime views downstream are kept current by the fleet, not
        # by runs, and a new version of their input would flag them unsynced for ever
        observation = dg.AssetObservation(asset_key=EVENTS_KEY, metadata=metadata)
        return dg.SensorResult(
            asset_events=[observation], cursor=json.dumps({"total": total, "at": now})
        )

    return _sensor
