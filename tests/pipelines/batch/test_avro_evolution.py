"""An Avro topic's schema evolves mid-stream: events written with v1, then with v2, which adds an
optional field, through confluent-kafka's AvroSerializer and the registry stand-in on the
embedded broker. The stream task runs the views of v1, then, redeployed with the declaration read
from v2, a view grouping by the new field. The archive gains the column (older files lack it,
and read it as null), the Spark correction puts both hours' events in the views' Iceberg tables,
and a message whose schema cannot be read into the declared fields is dead-lettered with its
schema id. The oracle reads the topic back with kafka-python and decodes each body with fastavro
and its writer's schema."""

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

from pipelines.batch import archive_hours, correct_hours
from pipelines.config import KafkaSettings, SluiceSettings, get_settings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.kafka import ensure_topics
from pipelines.kafka.reader import open_reader
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import VALID_KINDS, CollectingDeadLetters
from pipelines.views import View, parse_views
from tests.fixtures.processes import wait_until
from tests.fixtures.schema_registry import schema_registry
from tests.fixtures.stream import read_records
from tests.fixtures.tables import local_tables

pytestmark = [pytest.mark.broker, pytest.mark.spark]

V1 = {
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
V2 = {
    **V1,
    "fields": [*V1["fields"], {"name": "region", "type": ["null", "string"], "default": None}],
}
UNREADABLE = {**V1, "fields": [f for f in V1["fields"] if f["name"] != "org"]}
"""A writer's schema without a declared required field: its messages cannot be read."""
REGIONS = ["eu", "us", None]
PARTITIONS = 2
WINDOW_MS = 600_000
AGGREGATIONS = [
    {"aggregation": "count", "aggregated_col_name": "events"},
    {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
]


def _views(topic: str, *, region: bool) -> list[View]:
    views = [
        {
            "name": "by_org",
            "topic": topic,
            "grouping_cols": ["org"],
            "interval": "10m",
            "allowed_lateness": "1d",
            "aggregation_info": AGGREGATIONS,
        }
    ]
    if region:
        views.append({**views[0], "name": "by_region", "grouping_cols": ["region"]})
    return parse_views({"topics": [{"topic": topic, "encoding": "avro"}], "views": views})


def _oracle_read(schemas: dict[int, dict[str, Any]], value: bytes) -> tuple[int, Any]:
    """(schema id, record) as an independent reader sees a message: the body read by fastavro
    with its writer's schema, times left as longs."""
    schema_id = struct.unpack(">I", value[1:5])[0]
    schema = json.loads(schemas[schema_id]["schema"])
    for field in schema["fields"]:
        if isinstance(field["type"], dict):
            field["type"] = field["type"]["type"]
    body = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(schema), None)
    return schema_id, body


def _run(tasks: dict[int, StreamTask], bootstrap: str, topic: str, ends: dict[int, int]) -> None:
    """The product's reader hands the tasks their partitions up to ``ends``, then they flush."""
    reader = open_reader(bootstrap, KafkaSettings(client="confluent"), f"g-{uuid.uuid4().hex}")
    reader.assign({TopicPartition(topic, p): t.next_offset for p, t in tasks.items()})

    def drained() -> bool:
        for tp, batch in reader.poll(0.2, 1000).items():
            tasks[tp.partition].process(batch)
        return all(tasks[p].next_offset >= ends[p] for p in ends)

    try:
        wait_until(drained, 60, "the tasks to read the topic", every_s=0)
    finally:
        reader.close()
    for task in tasks.values():
        task.flush()


def _oracle(events: list[dict[str, Any]], column: str) -> dict[tuple[int, Any], tuple[int, int]]:
    counts: Counter = Counter()
    sums: Counter = Counter()
    for e in events:
        key = (e["event_time"] - e["event_time"] % WINDOW_MS, e.get(column))
        counts[key] += 1
        sums[key] += e["bytes_tx"]
    return {k: (counts[k], sums[k]) for k in counts}


def test_a_new_optional_avro_field_flows_to_the_archive_and_the_corrected_tables(
    broker, tmp_path, monkeypatch, spark
) -> None:
    topic = f"avro-evo-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS})
    options = GeneratorOptions(max_events=3_000, peak_rate=20_000, speedup=60, warmup_events=0)
    events = [
        json.loads(m.value)
        for m in synthesize(load_trace("nyc_taxi"), options)
        if m.kind in VALID_KINDS
    ][:1_500]
    store = LocalObjectStore(tmp_path / "storage")
    sink = CollectingDeadLetters()
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    with schema_registry() as registry:
        monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_URL", registry.url)
        get_settings.cache_clear()
        settings = SluiceSettings(state_dir=tmp_path, schema_registry_url=registry.url)
        client = SchemaRegistryClient({"url": registry.url})

        # v1: the first events, streamed with the views of v1
        serialize = AvroSerializer(client, json.dumps(V1))
        for event in events[:800]:
            producer.produce(topic, serialize(event, context), key=event["org"].encode())
        assert producer.flush(30) == 0
        first = _views(topic, region=False)
        assert "region" not in first[0].declaration.columns()
        ends = {p: len(rs) for p, rs in read_records(broker.bootstrap, topic, PARTITIONS).items()}
        tasks = {p: StreamTask(topic, p, first, store, sink, settings) for p in range(PARTITIONS)}
        for task in tasks.values():
            task.start_at(0)
        _run(tasks, broker.bootstrap, topic, ends)

        # v2 adds an optional region; one message is written with a schema missing org
        serialize = AvroSerializer(client, json.dumps(V2))
        for i, event in enumerate(events[800:]):
            event["region"] = REGIONS[i % len(REGIONS)]
            producer.produce(topic, serialize(event, context), key=event["org"].encode())
            if i == 300:
                unreadable = AvroSerializer(
                    client, json.dumps(UNREADABLE), conf={"auto.register.schemas": True}
                )
                other = SerializationContext(f"{topic}-other", MessageField.VALUE)
                producer.produce(topic, unreadable(event, other), key=b"x")
        assert producer.flush(30) == 0

        # redeployed: the declaration read from v2 has the field, so every view changes
        second = _views(topic, region=True)
        assert second[0].declaration.columns()["region"] == "string"
        assert "region" in second[0].declaration.nullable_columns()
        assert second[0].fingerprint != first[0].fingerprint
        contents = read_records(broker.bootstrap, topic, PARTITIONS)
        later = {p: StreamTask(topic, p, second, store, sink, settings) for p in tasks}
        for p, task in later.items():
            task.start_at(tasks[p].next_offset)
        _run(later, broker.bootstrap, topic, {p: len(rs) for p, rs in contents.items()})
        schemas = dict(registry.schemas)

    # the oracle: kafka-python read the topic back, fastavro reads each body
    decoded = [
        (p, r.offset, *_oracle_read(schemas, r.value)) for p, rs in contents.items() for r in rs
    ]
    bad_id = next(i for i, s in schemas.items() if "org" not in s["schema"])
    expected = [e for _, _, i, e in decoded if i != bad_id]
    (bad,) = [(p, o) for p, o, i, _ in decoded if i == bad_id]
    assert len(expected) == len(events)

    letters = {(p, d.offset): (d.reason, d.detail) for _, p, d in sink.letters}
    assert set(letters) == {bad}
    assert letters[bad][0] == "missing_field" and f"schema id {bad_id}" in letters[bad][1]

    # the archive: files of v1's hours lack the column, later files have it
    files = [pq.read_table(io.BytesIO(store.get(k))) for k in store.list("archive/events/")]
    assert {"region" in t.column_names for t in files} == {False, True}
    columns = ["event_id", "event_time", "org", "bytes_tx", "region"]
    archived = [tuple(row.get(c) for c in columns) for t in files for row in t.to_pylist()]
    assert sorted(archived, key=str) == sorted(
        (tuple(e.get(c) for c in columns) for e in expected), key=str
    )

    # the correction: both declarations' hours, each view's table equal to the oracle
    tables = local_tables(store.root, tmp_path / "catalog.db")
    try:
        results = correct_hours(spark, store, second, archive_hours(store), tables=tables)
        assert results and not any(r.skipped for r in results)
        # a declaration without the column reads the files that have it: they are ignored
        older = correct_hours(spark, store, first, archive_hours(store), tables=tables)
        assert older and not any(r.skipped for r in older)
        by_org = tables.find("by_org").scan().to_arrow().to_pylist()
        assert {
            (int(r["window_start"].timestamp() * 1000), r["org"]): (r["events"], r["bytes"])
            for r in by_org
        } == {k: (n, float(s)) for k, (n, s) in _oracle(expected, "org").items()}

        for view in second:
            column = view.grouping_cols[0]
            rows = tables.find(view.name).scan().to_arrow().to_pylist()
            got = {
                (int(r["window_start"].timestamp() * 1000), r[column]): (r["events"], r["bytes"])
                for r in rows
            }
            oracle = _oracle(expected, column)
            if column == "region":
                assert any(k[1] is None for k in oracle) and any(k[1] == "eu" for k in oracle)
            assert got == {k: (n, float(s)) for k, (n, s) in oracle.items()}
    finally:
        tables.close()
