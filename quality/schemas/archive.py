"""The raw archive's schemas: valid events and dead letters, as the stream tasks write them.

Types and nullability come from the writer's layouts (the generator's ``archive_schema``,
``DEAD_LETTER_SCHEMA``); the value rules are the decoder's (non-empty strings, ``bytes_tx >= 0``,
event times within the sane bounds, a known dead-letter reason). A Kafka position
``(topic, partition, offset)`` is archived once; an ``event_id`` may repeat, because duplicate
deliveries are archived as they came and only the correction drops them.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from pipelines.archive import DEAD_LETTER_SCHEMA, archive_schema
from pipelines.events.decode import DEAD_LETTER_REASONS
from pipelines.events.schema import EVENT_FIELDS, EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS
from pipelines.views.topics import ANY_TOPIC, default_declarations
from quality.schemas.pandas_backend import validate_frame
from quality.schemas.spec import (
    NON_EMPTY,
    FrameSpec,
    Rule,
    columns_of,
    ge,
    isin,
    lt,
)

__all__ = [
    "ARCHIVE_EVENTS",
    "DEAD_LETTERS",
    "EVENT_RULES",
    "validate_archive_events",
    "validate_dead_letters",
]

KAFKA_POSITION = ("topic", "partition", "offset")

EVENT_RULES: dict[str, tuple[Rule, ...]] = {
    name: (NON_EMPTY,) for name, field in EVENT_FIELDS.items() if not field.numeric
} | {
    "event_time": (ge(EVENT_TIME_MIN_MS), lt(EVENT_TIME_MAX_MS)),
    "bytes_tx": (ge(0),),
}
"""What every accepted event's fields satisfy (the decoder dead-letters anything else)."""

_POSITION_RULES: dict[str, tuple[Rule, ...]] = {
    "topic": (NON_EMPTY,),
    "partition": (ge(0),),
    "offset": (ge(0),),
}

ARCHIVE_EVENTS = FrameSpec(
    "archived events",
    columns_of(archive_schema(default_declarations()[ANY_TOPIC]), EVENT_RULES | _POSITION_RULES),
    unique=KAFKA_POSITION,
)

DEAD_LETTERS = FrameSpec(
    "archived dead letters",
    columns_of(DEAD_LETTER_SCHEMA, _POSITION_RULES | {"reason": (isin(DEAD_LETTER_REASONS),)}),
    unique=KAFKA_POSITION,
)


def validate_archive_events(data: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Archived events as pandas, or :class:`~quality.exceptions.SchemaViolation`."""
    return validate_frame(ARCHIVE_EVENTS, data)


def validate_dead_letters(data: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Archived dead letters as pandas, or :class:`~quality.exceptions.SchemaViolation`."""
    return validate_frame(DEAD_LETTERS, data)
