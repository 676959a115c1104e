"""An Avro topic on the embedded broker: a producer with confluent-kafka's AvroSerializer
writes the generator's events through the registry stand-in, with a message of an unknown
schema id and one without the magic byte among them; the product's reader hands them to a
stream task, whose realtime view and archive equal an oracle that kafka-python reads back and
fastavro's schemaless reader decodes, and whose dead letters are exactly the two bad messages,
each with its reason and schema id."""

from __future__ import annotations

import io
import json
import struct
import uuid
from collections import Counter
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka import TopicPartition

from pipelines.config import KafkaSettings, SluiceSettings, get_settings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.kafka import ensure_topics
from pipelines.kafka.reader import open_reader
from pipelines.serving.query import query_view
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import VALID_KINDS, CollectingDeadLetters
from pipelines.views import parse_views
from tests.fixtures.processes import wait_until
from tests.fixtures.schema_registry import schema_registry
from tests.fixtures.stream import read_records

pytestmark = pytest.mark.broker

SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "sluice.test",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "org", "type": "string"},
        {"name": "client", "type": "string"},
        {"name": "bytes_tx", "type": "long"},
        {"name": "session_id", "type": "string"},
        {"name": "event_type", "type": "string"},
    ],
}
FIELDS = ["event_id", "event_time", "org", "client", "bytes_tx", "session_id", "event_type"]
PARTITIONS = 2


def _view(topic: str) -> dict[str, Any]:
    return {
        "name": "by_org",
        "topic": topic,
        "grouping_cols": ["org"],
        "interval": "10m",
        "allowed_lateness": "1d",  # every event counts: the oracle needs no lateness rule
        "aggregation_info": [
            {"aggregation": "count", "aggregated_col_name": "events"},
            {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
        ],
    }


def _oracle_read(schemas: dict[int, dict[str, Any]], value: bytes) -> dict[str, Any] | None:
    """A message as an independent reader sees it: None unless it is framed with a schema id
    the registry issued; the body read by fastavro with that schema, times left as longs."""
    if value is None or len(value) < 5 or value[0] != 0:
        return None
    schema_id = struct.unpack(">I", value[1:5])[0]
    if schema_id not in schemas:
        return None
    schema = json.loads(schemas[schema_id]["schema"])
    for field in schema["fields"]:
        if isinstance(field["type"], dict):
            field["type"] = field["type"]["type"]
    return fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(schema), None)


def test_an_avro_topic_streams_through_the_registry(broker, tmp_path, monkeypatch) -> None:
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS})
    options = GeneratorOptions(max_events=3_000, peak_rate=20_000, speedup=60, warmup_events=0)
    events = [
        json.loads(m.value)
        for m in synthesize(load_trace("nyc_taxi"), options)
        if m.kind in VALID_KINDS
    ][:1_500]
    with schema_registry() as registry:
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(SCHEMA))
        context = SerializationContext(topic, MessageField.VALUE)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i, event in enumerate(events):
            producer.produce(topic, serialize(event, context), key=event["org"].encode())
            if i == 700:  # two bad messages mid-stream
                good = serialize(event, context)
                producer.produce(topic, b"\x00" + struct.pack(">I", 999) + good[5:], key=b"x")
                producer.produce(topic, b"\x07" + good[1:], key=b"y")
        assert producer.flush(30) == 0

        monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_URL", registry.url)
        get_settings.cache_clear()
        (view,) = parse_views(
            {
                "topics": [{"topic": topic, "encoding": "avro", "id": "event_id"}],
                "views": [_view(topic)],
            }
        )
        assert [f.name for f in view.declaration.fields] == [f for f in FIELDS if f != "event_time"]

        # the oracle: kafka-python reads the topic back, fastavro reads each body
        contents = read_records(broker.bootstrap, topic, PARTITIONS)
        decoded = [
            (p, r.offset, _oracle_read(registry.schemas, r.value))
            for p, rs in contents.items()
            for r in rs
        ]
        expected = [e for _, _, e in decoded if e is not None]
        bad = {(p, o) for p, o, e in decoded if e is None}
        assert len(expected) == len(events) and len(bad) == 2

        # the product: its own reader, a stream task per partition
        store = LocalObjectStore(tmp_path / "storage")
        sink = CollectingDeadLetters()
        settings = SluiceSettings(state_dir=tmp_path, schema_registry_url=registry.url)
        reader = open_reader(broker.bootstrap, KafkaSettings(client="confluent"), f"g-{topic}")
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        reader.assign({tp: 0 for tp in tps})
        tasks = {p: StreamTask(topic, p, [view], store, sink, settings) for p in range(PARTITIONS)}
        for task in tasks.values():
            task.start_at(0)
        ends = {p: len(rs) for p, rs in contents.items()}

        def drained() -> bool:
            for tp, batch in reader.poll(0.2, 1000).items():
                tasks[tp.partition].process(batch)
            return all(tasks[p].next_offset >= ends[p] for p in ends)

        wait_until(drained, 60, "the tasks to read the topic", every_s=0)
        reader.close()
        for task in tasks.values():
            task.flush()
        assert registry.unknown == []

    letters = {(p, d.offset): (d.reason, d.detail) for _, p, d in sink.letters}
    assert set(letters) == bad
    reasons = sorted(reason for reason, _ in letters.values())
    assert reasons == ["malformed_avro", "unknown_schema"]
    assert any("schema id 999" in detail for _, detail in letters.values())

    archived = [
        row
        for key in store.list("archive/events/")
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist()
    ]
    assert sorted(tuple(r[f] for f in FIELDS) for r in archived) == sorted(
        tuple(e[f] for f in FIELDS) for e in expected
    )

    window = 600_000
    counts: Counter = Counter()
    sums: Counter = Counter()
    for e in expected:
        key = (e["event_time"] - e["event_time"] % window, e["org"])
        counts[key] += 1
        sums[key] += e["bytes_tx"]
    start = min(e["event_time"] for e in expected) // window * window
    end = max(e["event_time"] for e in expected) + window
    rows = query_view(store, view, start, end, "realtime", tables=None).to_pylist()  # type: ignore[arg-type]
    got = {
        (int(r["window_start"].timestamp() * 1000), r["org"]): (r["events"], r["bytes"])
        for r in rows
    }
    assert got == {k: (counts[k], float(sums[k])) for k in counts}
