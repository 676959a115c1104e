"""The ``events`` topic: produced outside Dagster (the generator, real producers), observed here.

The ``events_offsets`` sensor (:mod:`orchestration.sensors.events_offsets`) records an
observation every tick with :func:`topic_observation`, so the asset shows when data arrived
and at what rate without a run; observing it by hand from the UI records the same offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from assets.constants import EVENTS_KEY, RAW_GROUP
from orchestration.resources import KafkaResource
from pipelines.config import get_settings

__all__ = ["events", "topic_observation"]


def topic_observation(
    topic: str,
    ends: Mapping[int, int],
    previous: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The metadata of an observation of ``topic``: log-end offset per partition, their sum
    and, given the ``previous`` observation's ``{"total", "at"}``, the write rate since it."""
    total = sum(ends.values())
    metadata: dict[str, Any] = {
        "topic": topic,
        "partitions": len(ends),
        "end_offsets": dg.MetadataValue.json({str(p): o for p, o in sorted(ends.items())}),
        "messages_written": total,
    }
    if previous and now is not None and now > previous["at"]:
        rate = max(0, total - int(previous["total"])) / (now - float(previous["at"]))
        metadata["rate_per_s"] = dg.MetadataValue.float(round(rate, 3))
        metadata["rate_window_s"] = dg.MetadataValue.float(round(now - float(previous["at"]), 3))
    return metadata


@dg.observable_source_asset(
    key=EVENTS_KEY,
    group_name=RAW_GROUP,
    description="The Kafka topic every view reads. Produced outside Dagster; the "
    "events_offsets sensor observes the log-end offset per partition and the write rate "
    "(needs a running broker).",
    metadata={"topic": get_settings().topic},
)
def events(kafka: KafkaResource) -> dg.ObserveResult:
    """Observe how far the topic has been written, so the UI shows when new data arrived."""
    topic = get_settings().topic
    ends = kafka.topic_end_offsets(topic)
    return dg.ObserveResult(
        data_version=dg.DataVersion(str(sum(ends.values()))),
        metadata=topic_observation(topic, ends),
    )
