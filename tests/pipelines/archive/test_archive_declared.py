"""The archive writes each topic's declared columns: doubles, booleans, nulls (a string's None,
another type's mask) and no id, read back equal to the messages as the json module reads them."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.archive import ArchiveBuffer, archive_schema
from pipelines.archive.writer import dictionary_columns
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import NO_WATERMARK, RecordBatch
from pipelines.segments import HOUR_MS
from pipelines.storage import LocalObjectStore

BASE = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS
PAYMENTS = TopicDeclaration.model_validate(
    {
        "topic": "payments",
        "event_time": {"path": "created", "format": "iso8601"},
        "fields": [
            {"name": "merchant", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "cents", "type": "long"},
            {"name": "refunded", "type": "boolean", "nullable": True},
            {"name": "country", "type": "string", "path": "card.country", "nullable": True},
            {"name": "tip", "type": "long", "nullable": True},
        ],
    }
)


def _message(i: int) -> dict:
    at = datetime.fromtimestamp((BASE + i * 97_000) / 1000, UTC).isoformat()
    card = {} if i % 5 == 0 else {"country": None if i % 7 == 0 else f"C{i % 4}"}
    message = {
        "merchant": f"m-{i % 6}",
        "amount": i * 1.25,
        "cents": i * 125,
        "refunded": [True, False, None][i % 3],
        "card": card,
        "created": at,
    }
    if i % 4:
        message["tip"] = i
    return message


def test_declared_columns_and_their_nulls_are_archived_as_the_messages_hold_them(tmp_path):
    messages = [_message(i) for i in range(300)]
    values = [json.dumps(m).encode() for m in messages]
    records = RecordBatch(list(range(300)), [BASE] * 300, values, [None] * 300)
    batch = decoder_for(PAYMENTS)(
        records, NO_WATERMARK, max_message_bytes=10_000, max_future_ms=10**12, partition=2
    )
    assert batch.dead_letters == [] and batch.nulls  # nulls reach the archive as masks
    store = LocalObjectStore(tmp_path)
    buffer = ArchiveBuffer("payments", 2, 0, declaration=PAYMENTS)
    buffer.add(batch)
    record = buffer.write(store)
    assert record is not None

    rows = []
    for key in record.files:
        file = pq.ParquetFile(io.BytesIO(store.get(key)))
        assert file.schema_arrow == archive_schema(PAYMENTS)
        encodings = {
            file.metadata.row_group(0).column(i).path_in_schema: file.metadata.row_group(0)
            .column(i)
            .encodings
            for i in range(file.metadata.num_columns)
        }
        assert "RLE_DICTIONARY" in encodings["merchant"]
        assert "RLE_DICTIONARY" not in encodings["cents"]
        rows += file.read().to_pylist()
    rows.sort(key=lambda r: r["offset"])

    def created(m: dict) -> int:
        return int(datetime.fromisoformat(m["created"]).timestamp() * 1000)

    expected = [
        {
            "event_time": created(m),
            "merchant": m["merchant"],
            "amount": m["amount"],
            "cents": m["cents"],
            "refunded": m["refunded"],
            "country": m["card"].get("country"),
            "tip": m.get("tip"),
            "topic": "payments",
            "partition": 2,
            "offset": i,
            "kafka_timestamp": BASE,
        }
        for i, m in enumerate(messages)
    ]
    assert rows == expected
    assert any(r["tip"] is None for r in rows) and any(r["refunded"] is None for r in rows)


def test_the_dictionary_holds_the_string_columns_but_the_id() -> None:
    with_id = PAYMENTS.model_copy(update={"id": "merchant"})
    assert dictionary_columns(PAYMENTS) == ("merchant", "country", "topic", "partition")
    assert dictionary_columns(with_id) == ("country", "topic", "partition")
    assert pa.types.is_boolean(archive_schema(PAYMENTS).field("refunded").type)
