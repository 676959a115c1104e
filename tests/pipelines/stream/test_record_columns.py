"""The record's key and headers as columns, end to end on the embedded broker: records produced
with keys and headers by kafka-python, a worker on either reader client, a view grouped by the
key's column and filtered by a header's, served exactly as an oracle computes from what a
separate kafka-python consumer reads back (plain Python: keys and header values read as UTF-8,
an absent header null, SQL's rule that a comparison with null is not true)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict

import orjson
import pytest
from kafka import KafkaProducer, TopicPartition

from pipelines.config import KafkaSettings, SluiceSettings
from pipelines.kafka import ensure_topics
from pipelines.kafka.memory import MemoryBroker
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.views import parse_views
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import memory_clients, read_records
from tests.fixtures.tables import query_realtime

PARTITIONS = 2
COUNT = 600
HOUR_MS = 3_600_000
CUSTOMERS = ["acme", "café", "北京", "zed", "ünï", "k5", "k6", "k7"]
REGIONS = ["eu", "us", None]  # None: the record has no region header

GENERATOR_FIELDS = [
    {"name": "event_id", "type": "string"},
    {"name": "org", "type": "string"},
    {"name": "client", "type": "string"},
    {"name": "bytes_tx", "type": "long", "minimum": 0},
    {"name": "session_id", "type": "string"},
    {"name": "event_type", "type": "string"},
]


def declaration(topic: str) -> dict:
    return {
        "topic": topic,
        "id": "event_id",
        "fields": GENERATOR_FIELDS,
        "record": {
            "key": "customer",
            "partition": "part",
            "offset": "position",
            "headers": {"region": "region", "origin": "x-origin"},
        },
    }


def views_of(topic: str):
    common = {"topic": topic, "interval": "1h"}
    counts = [
        {"aggregation": "count", "aggregated_col_name": "n"},
        {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
        {"aggregation": "max", "col_name": "position", "aggregated_col_name": "last"},
    ]
    return parse_views(
        {
            "topics": [declaration(topic)],
            "views": [
                {
                    **common,
                    "name": "eu_by_customer",
                    "grouping_cols": ["customer"],
                    "where": "region = 'eu'",
                    "aggregation_info": counts,
                },
                {
                    **common,
                    "name": "unlabelled_by_origin",
                    "grouping_cols": ["origin"],
                    "where": "region is null and part = 1",
                    "aggregation_info": counts,
                },
            ],
        }
    )


def _records() -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    """(key, value, headers, partition) of each record to produce, events over two hours."""
    start = int(time.time() * 1000) - 2 * HOUR_MS
    out = []
    for i in range(COUNT):
        event = {
            "event_id": f"e{i}",
            "event_time": start + i * (2 * HOUR_MS // COUNT),
            "org": "o",
            "client": "c",
            "bytes_tx": i * 7 % 1000,
            "session_id": "s",
            "event_type": "view",
        }
        region = REGIONS[i % 3]
        headers = [("x-origin", f"app-{i % 2}".encode())]
        if region is not None:
            headers.append(("region", region.encode()))
        if i % 5 == 0:
            headers.append(("unrelated", b""))
        key = CUSTOMERS[i % len(CUSTOMERS)].encode()
        out.append((key, orjson.dumps(event), headers, i % PARTITIONS))
    return out


def _produce(bootstrap: str, topic: str) -> None:
    """The records, produced by kafka-python (not Sluice's writer)."""
    out = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for key, value, headers, partition in _records():
            out.send(topic, value=value, key=key, headers=headers, partition=partition)
        out.flush()
    finally:
        out.close()


def _expected(records: dict[int, list[tuple[int, bytes, bytes, list]]]) -> dict[str, dict]:
    """Each view's rows by (window start, *groups), from (offset, key, value, headers) per
    partition as another client read them: plain Python, UTF-8, an absent header null."""
    expected: dict[str, dict] = {"eu_by_customer": {}, "unlabelled_by_origin": {}}
    for partition, rs in records.items():
        for offset, raw_key, value, raw_headers in rs:
            event = orjson.loads(value)
            headers = {name: v.decode() for name, v in raw_headers if v is not None}
            window = event["event_time"] - event["event_time"] % HOUR_MS
            if headers.get("region") == "eu":
                key = (window, raw_key.decode())
                view = "eu_by_customer"
            elif "region" not in headers and partition == 1:
                key = (window, headers["x-origin"])
                view = "unlabelled_by_origin"
            else:
                continue
            row = expected[view].setdefault(key, defaultdict(int))
            row["n"] += 1
            row["bytes"] += event["bytes_tx"]
            row["last"] = max(row["last"], offset)
    assert all(expected.values())
    return {name: {k: dict(v) for k, v in rows.items()} for name, rows in expected.items()}


def _served(store, view) -> dict[tuple, dict]:
    served = {}
    for row in query_realtime(store, view).to_pylist():
        start = int(row["window_start"].timestamp() * 1000)
        key = (start, *(row[c] for c in view.grouping_cols))
        served[key] = {name: row[name] for name in ("n", "bytes", "last")}
    return served


@pytest.mark.broker
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_a_view_grouped_by_the_key_and_filtered_by_a_header_equals_the_oracle(
    broker, tmp_path, client: str
) -> None:
    topic = f"records-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS, f"{topic}.dlq": 1})
    _produce(broker.bootstrap, topic)
    read = read_records(broker.bootstrap, topic, PARTITIONS)
    ends = {p: len(rs) for p, rs in read.items()}
    assert sum(ends.values()) == COUNT
    expected = _expected(
        {p: [(r.offset, r.key, r.value, r.headers) for r in rs] for p, rs in read.items()}
    )

    views = views_of(topic)
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
    )
    store = LocalObjectStore(settings.resolved_storage_root)
    tasks = [TaskId(topic, p) for p in range(PARTITIONS)]
    clients = open_worker_clients(broker.bootstrap, KafkaSettings(client=client), topic)
    worker = StreamWorker("w0", tasks, views, settings, clients, store)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: all(
                worker.tasks.get(t) is not None and worker.tasks[t].next_offset == ends[t.partition]
                for t in tasks
            ),
            60,
            "every partition read to its end",
        )
    finally:
        worker.stop_event.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert sum(worker.tasks[t].dead_lettered.total() for t in tasks) == 0

    for view in views:
        assert _served(store, view) == expected[view.name], view.name


def test_virtual_tasks_keep_each_record_with_its_headers(tmp_path) -> None:
    """Two buckets of a partition each keep only their records: the headers must stay with
    their records through that selection (and through the slices a crashed task refolds)."""
    broker = MemoryBroker()
    topic = "records"
    broker.create_topic(topic, PARTITIONS)
    broker.create_topic(f"{topic}.dlq", 1)
    for i, (key, value, headers, partition) in enumerate(_records()):
        broker.send(topic, key, value, partition=partition, timestamp_ms=1_000 + i, headers=headers)
    expected = _expected(
        {
            p: [(r.offset, r.key, r.value, r.headers) for r in broker.records(topic, p)]
            for p in range(PARTITIONS)
        }
    )
    views = views_of(topic)
    settings = SluiceSettings(state_dir=tmp_path / "state", dead_letter_topic=f"{topic}.dlq")
    store = LocalObjectStore(settings.resolved_storage_root)
    tasks = [TaskId(topic, p, b, 2) for p in range(PARTITIONS) for b in range(2)]
    worker = StreamWorker("w0", tasks, views, settings, memory_clients(broker, topic), store)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: all(
                worker.tasks.get(t) is not None
                and worker.tasks[t].next_offset
                == broker.bounds(TopicPartition(topic, t.partition))[1]
                for t in tasks
            ),
            60,
            "every bucket read to its partition's end",
        )
    finally:
        worker.stop_event.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert all(0 < worker.tasks[t].kept < worker.tasks[t].seen for t in tasks)  # split
    for view in views:
        assert _served(store, view) == expected[view.name], view.name
