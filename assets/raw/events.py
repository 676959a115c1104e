"""The ``events`` topic: produced outside Dagster (the generator, real producers), observed here."""

import dagster as dg

from assets.constants import EVENTS_KEY, RAW_GROUP
from orchestration.resources import KafkaResource
from pipelines.config import get_settings

__all__ = ["events"]


@dg.observable_source_asset(
    key=EVENTS_KEY,
    group_name=RAW_GROUP,
    description="The Kafka topic every view reads. Produced outside Dagster; an observation "
    "records the log-end offset per partition (needs a running broker).",
    metadata={"topic": get_settings().topic},
)
def events(kafka: KafkaResource) -> dg.ObserveResult:
    """Observe how far the topic has been written, so the UI shows when new data arrived."""
    topic = get_settings().topic
    ends = kafka.topic_end_offsets(topic)
    total = sum(ends.values())
    return dg.ObserveResult(
        data_version=dg.DataVersion(str(total)),
        metadata={
            "topic": topic,
            "partitions": len(ends),
            "end_offsets": dg.MetadataValue.json({str(p): o for p, o in sorted(ends.items())}),
            "messages_written": total,
        },
    )
