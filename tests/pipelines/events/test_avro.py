"""Avro topics: messages written by confluent-kafka's AvroSerializer through the registry
stand-in are decoded with the JSON decoder's readings; the oracle reads each body with
fastavro's schemaless reader and the schema the stand-in holds for its id."""

from __future__ import annotations

import io
import json
import random
import socket
import struct
from typing import Any

import fastavro
import pytest
import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pipelines.events.avro import avro_decoder_for
from pipelines.events.avro_declaration import resolve_avro
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.decode import NO_WATERMARK
from pipelines.exceptions import SchemaRegistryUnreachable
from pipelines.testing import Record
from pipelines.views.topics import check_declarations
from tests.fixtures.schema_registry import SchemaRegistry, schema_registry

T0 = 1_700_000_000_000
V1: dict[str, Any] = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "merchant", "type": "string"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": "double"},
        {"name": "cents", "type": "long"},
        {"name": "card", "type": {"type": "record", "name": "Card", "fields": [
            {"name": "country", "type": ["null", "string"], "default": None},
        ]}},
        {"name": "refunded", "type": "boolean"},
    ],
}  # fmt: skip
V2: dict[str, Any] = {
    **V1,
    "fields": [*V1["fields"], {"name": "reason", "type": ["null", "string"], "default": None}],
}
COLUMNS = ("event_time", "merchant", "amount", "cents", "card_country", "refunded")


def _payment(i: int, version: int = 1) -> dict[str, Any]:
    record = {
        "merchant": f"m{i % 3}",
        "event_time": T0 + 1_000 * i,
        "amount": 0.25 * i,
        "cents": 25 * i,
        "card": {"country": None if i % 4 == 0 else ["FR", "DE"][i % 2]},
        "refunded": i % 5 == 0,
    }
    if version == 2:
        record["reason"] = None if i % 2 else f"r{i}"
    return record


def _serializer(registry: SchemaRegistry, schema: dict[str, Any], topic: str = "payments"):
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda record: serialize(record, context)


def _oracle(registry: SchemaRegistry, value: bytes) -> dict[str, Any]:
    """A message read independently: the id from the first five bytes, the schema the stand-in
    keeps for it, fastavro's schemaless reader with logical types left as written."""
    magic, schema_id = struct.unpack(">bI", value[:5])
    assert magic == 0
    schema = json.loads(registry.schemas[schema_id]["schema"])
    for field in schema["fields"]:
        if isinstance(field["type"], dict) and field["type"].get("logicalType"):
            field["type"] = field["type"]["type"]
    return fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(schema), None)


def _row(record: dict[str, Any], extra: tuple[str, ...] = ()) -> tuple:
    flat = {**record, "card_country": record["card"]["country"]}
    return tuple(flat.get(c) for c in COLUMNS + extra)


def _decode(declaration: TopicDeclaration, registry: SchemaRegistry | None, values: list):
    decoder = avro_decoder_for(declaration, {"url": registry.url} if registry else None)
    records = [Record(i, T0 + i, b"k", v) for i, v in enumerate(values)]
    return decoder(records, NO_WATERMARK, max_message_bytes=100_000, max_future_ms=10**12)


def _rows(batch, extra: tuple[str, ...] = ()) -> list[tuple]:
    names = COLUMNS + extra
    out = []
    for k in range(len(batch)):
        row = []
        for name in names:
            value = batch.columns[name][k]
            null = name in batch.nulls and batch.nulls[name][k]
            row.append(None if null else value.item() if hasattr(value, "item") else value)
        out.append(tuple(row))
    return out


def _declaration(registry: SchemaRegistry) -> TopicDeclaration:
    """The topic's declaration with its fields read from the registry's latest schema."""
    bare = TopicDeclaration(topic="payments", encoding="avro")
    return resolve_avro(bare, None, lambda: {"url": registry.url})


def test_fields_come_from_the_registrys_latest_schema() -> None:
    with schema_registry() as registry:
        registry.register("payments-value", V1)
        declared = {
            f.name: (f.type.value, f.path, f.nullable) for f in _declaration(registry).fields
        }
        assert declared == {
            "merchant": ("string", None, False),
            "amount": ("double", None, False),
            "cents": ("long", None, False),
            "card_country": ("string", "card.country", True),
            "refunded": ("boolean", None, False),
        }
        registry.register("payments-value", V2)
        assert _declaration(registry).columns()["reason"].value == "string"
        assert "GET /subjects/payments-value/versions/latest" in registry.requests
        assert registry.unknown == []


def test_records_written_by_the_serializer_decode_as_the_oracle_reads_them() -> None:
    with schema_registry() as registry:
        write = _serializer(registry, V1)
        values = [write(_payment(i)) for i in range(200)]
        batch = _decode(_declaration(registry), registry, values)
        assert batch.dead_letters == []
        assert _rows(batch) == [_row(_oracle(registry, v)) for v in values]
        assert batch.columns["card_country"].tolist().count(None) == 50  # ["null", string]
        assert registry.unknown == []


def test_a_v2_schema_with_an_optional_field_mid_stream_decodes_both_versions() -> None:
    with schema_registry() as registry:
        v1, v2 = _serializer(registry, V1), _serializer(registry, V2)
        values = [v1(_payment(i)) for i in range(50)] + [v2(_payment(i, 2)) for i in range(50, 100)]
        declaration = _declaration(registry)  # the latest: v2, with its new column
        assert "reason" in declaration.columns()
        batch = _decode(declaration, registry, values)
        assert batch.dead_letters == []
        expected = [_row({"reason": None, **_oracle(registry, v)}, ("reason",)) for v in values]
        assert _rows(batch, ("reason",)) == expected
        assert {e[-1] for e in expected[:50]} == {None}
        assert any(e[-1] is not None for e in expected[50:])


def test_unknown_ids_bad_framing_and_unreadable_bodies_are_dead_lettered_with_the_schema_id() -> (
    None
):
    with schema_registry() as registry:
        write = _serializer(registry, V1)
        good = write(_payment(1))
        schema_id = struct.unpack(">I", good[1:5])[0]
        values = [
            good,
            b"\x00" + struct.pack(">I", 4242) + good[5:],  # an id the registry never issued
            b"\x01" + good[1:],  # not Confluent's magic byte
            good[:3],  # too short for the framing
            good[:8],  # a body cut short
            None,
            write(_payment(2)),
        ]
        batch = _decode(_declaration(registry), registry, values)
        got = {d.offset: (d.reason, d.detail) for d in batch.dead_letters}
        assert batch.offsets.tolist() == [0, 6]
        assert got[1][0] == "unknown_schema" and "schema id 4242" in got[1][1]
        assert got[2] == ("malformed_avro", "magic byte 1, expected 0 (Confluent's wire format)")
        assert got[3][0] == "malformed_avro" and "too short" in got[3][1]
        assert got[4][0] == "malformed_avro" and f"schema id {schema_id}" in got[4][1]
        assert got[5][0] == "empty"
        # the registry was asked for the unknown id once, not once per message
        again = _decode(_declaration(registry), registry, [values[1]] * 5)
        assert [d.reason for d in again.dead_letters] == ["unknown_schema"] * 5
        assert registry.requests.count("GET /schemas/ids/4242") == 1


def test_a_schema_that_cannot_be_read_into_the_declared_fields_is_dead_lettered() -> None:
    other = {
        "type": "record",
        "name": "Other",
        "fields": [
            {"name": "merchant", "type": "long"},
            {"name": "event_time", "type": "long"},
        ],
    }
    with schema_registry() as registry:
        registry.register("payments-value", V1)
        declaration = _declaration(registry)
        write = _serializer(registry, other)
        batch = _decode(declaration, registry, [write({"merchant": 7, "event_time": T0})])
        (letter,) = batch.dead_letters
        schema_id = struct.unpack(">I", write({"merchant": 7, "event_time": T0})[1:5])[0]
        assert letter.reason == "missing_field"
        assert letter.detail.endswith(f"(schema id {schema_id})")
        assert len(batch) == 0


def test_a_registry_that_does_not_answer_stops_the_batch_rather_than_dead_letter_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with schema_registry() as registry:
        registry.register("payments-value", V1)
        value = _serializer(registry, V1)(_payment(1))
        declaration = _declaration(registry)
    decoder = avro_decoder_for(declaration, {"url": f"http://127.0.0.1:{port}", "timeout": 2})
    with pytest.raises(SchemaRegistryUnreachable, match="schema id"):
        decoder(
            [Record(0, T0, b"k", value)], NO_WATERMARK, max_message_bytes=10**5, max_future_ms=1
        )


@pytest.mark.parametrize("framing", ["plain", "confluent"])
def test_a_schema_file_reads_plain_or_framed_bodies(tmp_path, framing: str) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "payment.avsc").write_text(json.dumps(V1))
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        json.dumps(
            {
                "topics": [
                    {
                        "topic": "payments",
                        "encoding": "avro",
                        "schema_file": "schemas/payment.avsc",
                        "framing": framing,
                    }
                ]
            }
        )
    )
    found, problems = check_declarations(yaml.safe_load(topics.read_text())["topics"], tmp_path)
    declaration = found["payments"]
    assert problems == []
    assert declaration.schema_file == str((tmp_path / "schemas" / "payment.avsc").resolve())
    assert "card_country" in declaration.columns()
    parsed = fastavro.parse_schema(V1)

    def encode(record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        if framing == "confluent":
            out.write(b"\x00" + struct.pack(">I", 77))
        fastavro.schemaless_writer(out, parsed, record)
        return out.getvalue()

    records = [_payment(i) for i in range(20)]
    batch = _decode(declaration, None, [*map(encode, records), encode(records[0]) + b"\x00"])
    assert _rows(batch) == [_row(r) for r in records]
    (extra,) = batch.dead_letters
    assert extra.reason == "malformed_avro" and "1 bytes left after the record" in extra.detail


def test_an_avro_declaration_without_a_schema_file_needs_a_registry(tmp_path) -> None:
    topics = tmp_path / "topics.yaml"
    topics.write_text(json.dumps({"topics": [{"topic": "payments", "encoding": "avro"}]}))
    from pipelines.exceptions import ViewDefinitionError
    from pipelines.views import load_declarations

    with pytest.raises(ViewDefinitionError, match="SLUICE_SCHEMA_REGISTRY_URL"):
        load_declarations(topics)


def test_a_registry_that_does_not_answer_at_load_is_a_problem_of_the_declaration(
    monkeypatch,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_URL", f"http://user:pw-s3cret@127.0.0.1:{port}")
    from pipelines.config import get_settings

    get_settings.cache_clear()
    try:
        found, problems = check_declarations([{"topic": "payments", "encoding": "avro"}])
    finally:
        get_settings.cache_clear()
    assert found == {}
    ((where, message),) = problems
    assert where == "topics[0].encoding"
    assert "schema registry" in message and "payments-value" in message
    assert "s3cret" not in message


def test_a_path_into_an_avro_array_reads_its_element(tmp_path) -> None:
    schema = {
        "type": "record",
        "name": "Tagged",
        "fields": [
            {"name": "event_time", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
    (tmp_path / "tagged.avsc").write_text(json.dumps(schema))
    declaration = TopicDeclaration(
        topic="tagged",
        encoding="avro",
        schema_file=str(tmp_path / "tagged.avsc"),
        framing="plain",
        fields=[{"name": "second", "type": "string", "path": "tags[1]", "nullable": True}],
    )
    parsed = fastavro.parse_schema(schema)
    records = [{"event_time": T0 + i, "tags": ["a", f"t{i}"][: i % 3]} for i in range(9)]
    values = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        values.append(out.getvalue())
    batch = _decode(declaration, None, values)
    assert batch.dead_letters == []
    expected = [r["tags"][1] if len(r["tags"]) > 1 else None for r in records]
    assert batch.columns["second"].tolist() == expected


def test_the_any_topic_declaration_cannot_take_its_avro_fields_from_the_registry() -> None:
    found, problems = check_declarations([{"topic": "*", "encoding": "avro"}])
    assert found == {}
    assert problems == [
        (
            "topics[0].fields",
            'topic "*" has no subject of its own in the schema registry: declare its fields or '
            "a schema_file",
        )
    ]


def test_the_same_events_decode_alike_as_avro_and_as_json(tmp_path) -> None:
    """The readings are shared: each column (values and nulls) is the JSON decoder's."""
    (tmp_path / "payment.avsc").write_text(json.dumps(V2))
    fields = [
        {"name": "merchant", "type": "string"},
        {"name": "amount", "type": "double", "minimum": 1},
        {"name": "cents", "type": "long"},
        {"name": "card_country", "type": "string", "path": "card.country", "nullable": True},
        {"name": "refunded", "type": "boolean"},
        {"name": "reason", "type": "string", "nullable": True},
    ]
    common = {"topic": "payments", "fields": fields}
    avro = TopicDeclaration(
        **common, encoding="avro", schema_file=str(tmp_path / "payment.avsc"), framing="plain"
    )
    as_json = TopicDeclaration(**common)
    records = [_payment(i, 2) for i in range(60)]
    records[5]["merchant"] = ""  # a required string empty: wrong_type in both
    parsed = fastavro.parse_schema(V2)

    def encode(record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        return out.getvalue()

    from pipelines.events.declared import decoder_for

    got = _decode(avro, None, [encode(r) for r in records])
    json_records = [Record(i, T0 + i, b"k", json.dumps(r).encode()) for i, r in enumerate(records)]
    want = decoder_for(as_json)(
        json_records, NO_WATERMARK, max_message_bytes=100_000, max_future_ms=10**12
    )
    assert got.offsets.tolist() == want.offsets.tolist()
    assert {n: c.tolist() for n, c in got.columns.items()} == {
        n: c.tolist() for n, c in want.columns.items()
    }
    assert {n: m.tolist() for n, m in got.nulls.items()} == {
        n: m.tolist() for n, m in want.nulls.items()
    }
    assert [(d.offset, d.reason) for d in got.dead_letters] == [
        (d.offset, d.reason) for d in want.dead_letters
    ]
    assert {d.reason for d in got.dead_letters} == {"wrong_type", "out_of_range"}
    for mine, theirs in zip(got.dead_letters, want.dead_letters, strict=True):
        assert mine.detail.startswith(theirs.detail)  # then the schema file


def test_random_bodies_after_a_known_schema_id_never_raise() -> None:
    rng = random.Random(46)
    with schema_registry() as registry:
        good = _serializer(registry, V1)(_payment(1))
        header = good[:5]
        values = [header + rng.randbytes(rng.randrange(0, 60)) for _ in range(300)]
        values += [good[:k] for k in range(len(good))]
        batch = _decode(_declaration(registry), registry, values)
    assert batch.consumed == len(values)
    assert len(batch) + len(batch.dead_letters) == len(values)
    reasons = {d.reason for d in batch.dead_letters}
    assert reasons <= {"malformed_avro", "wrong_type", "out_of_range", "missing_field"}
    assert "decoder_error" not in reasons
