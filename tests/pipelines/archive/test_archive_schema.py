"""The archive's Parquet schema follows a topic's declaration."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import ValidationError

from pipelines.archive.schema import archive_schema, column_type
from pipelines.events.declaration import ColumnType, TopicDeclaration

PAYMENTS = {
    "topic": "payments",
    "event_time": {"path": "created", "format": "iso8601"},
    "fields": [
        {"name": "merchant", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "cents", "type": "long"},
        {"name": "refunded", "type": "boolean", "nullable": True},
        {"name": "settled", "type": "timestamp", "nullable": True},
    ],
    "record": {"key": "card", "offset": "at", "headers": {"trace": "trace-id"}},
}


def test_each_declared_column_gets_its_type_and_nullability_then_the_kafka_columns() -> None:
    schema = archive_schema(TopicDeclaration.model_validate(PAYMENTS))
    assert [(f.name, f.type, f.nullable) for f in schema] == [
        ("event_time", pa.int64(), False),
        ("merchant", pa.string(), False),
        ("amount", pa.float64(), False),
        ("cents", pa.int64(), False),
        ("refunded", pa.bool_(), True),
        ("settled", pa.int64(), True),
        ("card", pa.string(), True),
        ("at", pa.int64(), False),
        ("trace", pa.string(), True),
        ("topic", pa.string(), False),
        ("partition", pa.int32(), False),
        ("offset", pa.int64(), False),
        ("kafka_timestamp", pa.int64(), False),
    ]
    assert column_type(schema.field("settled")) is ColumnType.TIMESTAMP
    assert column_type(schema.field("event_time")) is ColumnType.TIMESTAMP
    assert column_type(schema.field("cents")) is ColumnType.LONG


def test_on_type_error_null_makes_every_field_nullable() -> None:
    schema = archive_schema(TopicDeclaration.model_validate({**PAYMENTS, "on_type_error": "null"}))
    assert [f.name for f in schema if f.nullable] == [
        "merchant",
        "amount",
        "cents",
        "refunded",
        "settled",
        "card",
        "trace",
    ]


@pytest.mark.parametrize("name", ["offset", "partition", "topic", "kafka_timestamp", "__hour"])
def test_the_archive_own_column_names_cannot_be_declared(name: str) -> None:
    fields = [*PAYMENTS["fields"], {"name": name, "type": "long"}]
    with pytest.raises(ValidationError, match="the archive's own column names"):
        TopicDeclaration.model_validate({**PAYMENTS, "fields": fields})
