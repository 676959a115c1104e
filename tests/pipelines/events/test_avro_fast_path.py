"""The Avro decoder's bulk checks agree with its readings: for random records under a writer
schema whose every field is a union of several types (so values of the wrong type, nulls,
absent paths, out-of-range numbers and times all occur), a batch decodes each message exactly
as the readings alone classify it, one message at a time: the same values, or the same dead
letter with the same reason and detail."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from pipelines.events.avro import avro_decoder_for
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.decode import NO_WATERMARK, NULLED
from pipelines.testing import Record

TIME = {"type": "long", "logicalType": "timestamp-millis"}
INNER = {"type": "record", "name": "Inner", "fields": [
    {"name": "x", "type": ["null", "string", "long"]},
]}  # fmt: skip
SCHEMA = {
    "type": "record",
    "name": "Wild",
    "fields": [
        {"name": "s", "type": ["null", "string", "long"]},
        {"name": "n", "type": ["null", "long", "double", "string", "boolean"]},
        {"name": "d", "type": ["null", "double", "long", "string"]},
        {"name": "b", "type": ["null", "boolean", "long"]},
        {"name": "t", "type": ["null", TIME, "string"]},
        {"name": "event_time", "type": ["null", TIME, "string", "double"]},
        {"name": "r", "type": ["null", INNER, "string"]},
    ],
}


def _declaration(schema_file: str, soft: bool) -> TopicDeclaration:
    return TopicDeclaration(
        topic="wild",
        encoding="avro",
        schema_file=schema_file,
        framing="plain",
        on_type_error="null" if soft else "dead_letter",
        fields=[
            {"name": "s", "type": "string"},
            {"name": "n", "type": "long", "nullable": True, "minimum": 0},
            {"name": "d", "type": "double", "minimum": -5},
            {"name": "b", "type": "boolean"},
            {"name": "t", "type": "timestamp", "nullable": True},
            {"name": "x", "type": "string", "path": "r.x", "nullable": True},
        ],
    )


def _record(rng: random.Random) -> dict[str, Any]:
    """A valid record, or (half the time) one with one to three fields of any type."""
    at = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    record: dict[str, Any] = {
        "s": rng.choice(["a", "b", "é" * 3]),
        "n": rng.choice([None, 0, 7, 2**40]),
        "d": rng.choice([0.5, -5.0, 3.25]),
        "b": rng.choice([True, False]),
        "t": rng.choice([None, at, at.isoformat()]),
        "event_time": rng.choice([at, at.replace(hour=13)]),
        "r": rng.choice([None, {"x": None}, {"x": "y"}]),
    }
    if rng.random() < 0.5:
        return record
    wild = {
        "s": ["", 5, None],
        "n": [-1, 2.5, "7", True, 2**63 - 1, -(2**63)],
        "d": [-5.5, 7, "x", None, float("nan"), 1e300],
        "b": [None, 1],
        "t": ["not a time", datetime(1990, 1, 1, tzinfo=UTC), "2024-01-01T00:00:00Z"],
        "event_time": [None, "yesterday", 1.5, 1.7e12, datetime(1990, 1, 1, tzinfo=UTC)],
        "r": ["flat", {"x": 5}, {"x": ""}],
    }
    for name in rng.sample(sorted(wild), rng.randint(1, 3)):
        record[name] = rng.choice(wild[name])
    return record


def _encode(parsed: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


@pytest.mark.parametrize("soft", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_batch_decodes_each_message_as_the_readings_classify_it(
    tmp_path, seed: int, soft: bool
) -> None:
    schema_file = tmp_path / "wild.avsc"
    schema_file.write_text(json.dumps(SCHEMA))
    decoder = avro_decoder_for(_declaration(str(schema_file), soft), None)
    parsed = fastavro.parse_schema(SCHEMA)
    rng = random.Random(seed)
    values = [_encode(parsed, _record(rng)) for _ in range(400)]
    values[7] = values[7][:2]  # a body cut short
    expected = [decoder.classify(v, 10**6, 0) for v in values]
    assert sum(type(e) is dict for e in expected) > 20, "too few valid messages to compare"
    assert len({e[0] for e in expected if type(e) is tuple}) >= 3, "too few kinds of refusal"

    batch = decoder(
        [Record(i, 0, None, v) for i, v in enumerate(values)],
        NO_WATERMARK,
        max_message_bytes=10**6,
        max_future_ms=10**15,
    )
    letters = {d.offset: (d.reason, d.detail, d.field) for d in batch.dead_letters}
    assert letters == {i: (*e, None)[:3] for i, e in enumerate(expected) if type(e) is tuple}
    kept = [e for e in expected if type(e) is dict]
    assert batch.offsets.tolist() == [i for i, e in enumerate(expected) if type(e) is dict]
    nulled: dict[tuple[str, str], int] = {}
    for e in kept:
        for key in e.get(NULLED, ()):
            nulled[key] = nulled.get(key, 0) + 1
    assert batch.nulled == nulled
    assert bool(nulled) == soft
    for name in (c.name for c in decoder.columns):
        column = batch.columns[name].tolist()
        null = batch.nulls.get(name)
        got = [None if null is not None and null[k] else v for k, v in enumerate(column)]
        want = [e[name] for e in kept]
        assert [repr(v) for v in got] == [repr(v) for v in want], name
