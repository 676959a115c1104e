"""The raw archive's schemas: a topic's valid events and the dead letters, as the tasks write them.

A topic's archived events follow its declaration: the types and nullability of
``archive_schema(declaration)`` (nullable columns may hold null, the others may not), and the
decoder's value rules, read from the declaration too (:func:`column_rules`): a required
string is non-empty, a declared ``minimum`` is a lower bound, times lie within the sane
bounds. A Kafka position ``(topic, partition, offset)`` is archived once; a declared id may
repeat, because duplicate deliveries are archived as they came and only the correction drops
them. Dead letters have one layout for every topic (``DEAD_LETTER_SCHEMA``).
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from pipelines.archive.schema import archive_schema
from pipelines.archive.writer import DEAD_LETTER_SCHEMA
from pipelines.events.declaration import (
    EVENT_TIME,
    EVENT_TIME_MAX_MS,
    EVENT_TIME_MIN_MS,
    ColumnType,
    TopicDeclaration,
)
from pipelines.events.decode import DEAD_LETTER_REASONS
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
    "DEAD_LETTERS",
    "archive_events_spec",
    "column_rules",
    "validate_archive_events",
    "validate_dead_letters",
]

KAFKA_POSITION = ("topic", "partition", "offset")

_TIME_RULES = (ge(EVENT_TIME_MIN_MS), lt(EVENT_TIME_MAX_MS))
_POSITION_RULES: dict[str, tuple[Rule, ...]] = {
    "topic": (NON_EMPTY,),
    "partition": (ge(0),),
    "offset": (ge(0),),
}


def column_rules(declaration: TopicDeclaration) -> dict[str, tuple[Rule, ...]]:
    """What every accepted event's columns satisfy, by column (the decoder dead-letters, or
    under ``on_type_error: null`` nulls, anything else): the event time and timestamp fields
    within the sane bounds, required strings non-empty, a declared ``minimum`` as ``>=``, the
    record's partition and offset ``>= 0``. Nulls are the nullability's business."""
    rules: dict[str, tuple[Rule, ...]] = {EVENT_TIME: _TIME_RULES}
    for field in declaration.fields:
        found: tuple[Rule, ...] = ()
        if field.type is ColumnType.STRING and not field.nullable:
            found = (NON_EMPTY,)
        elif field.type is ColumnType.TIMESTAMP:
            found = _TIME_RULES
        elif field.type.numeric and field.minimum is not None:
            found = (ge(field.minimum),)
        if found:
            rules[field.name] = found
    for name in (declaration.record.partition, declaration.record.offset):
        if name is not None:
            rules[name] = (ge(0),)
    return rules


def archive_events_spec(declaration: TopicDeclaration) -> FrameSpec:
    """The spec of ``declaration``'s archived events (both pandera schemas derive from it)."""
    return FrameSpec(
        f"archived events of topic {declaration.topic!r}",
        columns_of(archive_schema(declaration), column_rules(declaration) | _POSITION_RULES),
        unique=KAFKA_POSITION,
    )


DEAD_LETTERS = FrameSpec(
    "archived dead letters",
    columns_of(DEAD_LETTER_SCHEMA, _POSITION_RULES | {"reason": (isin(DEAD_LETTER_REASONS),)}),
    unique=KAFKA_POSITION,
)


def validate_archive_events(
    data: pa.Table | pd.DataFrame, declaration: TopicDeclaration
) -> pd.DataFrame:
    """Archived events of ``declaration``'s topic as pandas, or
    :class:`~quality.exceptions.SchemaViolation` naming each column that breaks it."""
    return validate_frame(archive_events_spec(declaration), data)


def validate_dead_letters(data: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Archived dead letters as pandas, or :class:`~quality.exceptions.SchemaViolation`.
    Files written before dead letters kept their ``field`` lack it: null there."""
    if isinstance(data, pa.Table):
        if FIELD not in data.column_names:
            data = data.append_column(FIELD, pa.nulls(data.num_rows, pa.string()))
    elif FIELD not in data.columns:
        data = data.assign(**{FIELD: None})
    return validate_frame(DEAD_LETTERS, data)


FIELD = "field"
"""The dead letters' column added last (see :data:`DEAD_LETTER_SCHEMA`)."""
