"""A team's own topic end to end: nested JSON payments with doubles, booleans, nullable fields, an
ISO-8601 time and no id, produced to the embedded broker, streamed by a worker into the archive
and corrected by Spark into the view's table. The oracle reads the topic back with kafka-python
and the json module, and follows the declaration's rules by hand (no id: every record counts,
a producer's retry too)."""

from __future__ import annotations

import io
import json
import random
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest

from pipelines.batch import archive_hours, correct_hours
from pipelines.config import SluiceSettings
from pipelines.kafka import ensure_topics, producer
from pipelines.segments import read_range_records
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.views import parse_views
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import read_records
from tests.fixtures.tables import local_tables

pytestmark = [pytest.mark.broker, pytest.mark.spark]

PARTITIONS = 2
WINDOW_MS = 600_000
START = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
DECLARATION = {
    "event_time": {"path": "created", "format": "iso8601"},
    "fields": [
        {"name": "merchant", "type": "string", "path": "merchant.name"},
        {"name": "amount", "type": "double"},
        {"name": "cents", "type": "long"},
        {"name": "refunded", "type": "boolean", "nullable": True},
        {"name": "country", "type": "string", "path": "card.country", "nullable": True},
    ],
}
AGGREGATIONS = [
    {"aggregation": "count", "aggregated_col_name": "payments"},
    {"aggregation": "sum", "col_name": "cents", "aggregated_col_name": "cents"},
    {"aggregation": "max", "col_name": "amount", "aggregated_col_name": "biggest"},
]


def _payments(n: int) -> list[bytes]:
    """Payments in event-time order (a few seconds apart, times in two UTC offsets), some
    retried by their producer (sent twice), some bad (dead-lettered, not archived)."""
    rng = random.Random(46)
    out = []
    for i in range(n):
        at = START + timedelta(milliseconds=i * 4_000 + rng.randrange(1_000))
        zone = timezone(timedelta(hours=2)) if i % 2 else UTC
        cents = rng.randrange(50, 500_000)
        card = {"country": rng.choice(["DE", "FR", "US", None])} if i % 9 else {}
        refunded = rng.choice([True, False, None]) if i % 5 else None
        payment = {
            "merchant": {"name": f"shop-{rng.randrange(6)}", "mcc": 5411},
            "amount": cents / 100,
            "cents": cents,
            "card": card,
            "created": at.astimezone(zone).isoformat(timespec="milliseconds"),
        }
        if refunded is not None or i % 2:
            payment["refunded"] = refunded
        value = json.dumps(payment).encode()
        out.append(value)
        if i % 97 == 0:
            out.append(value)  # a producer's retry
        if i % 211 == 0:
            out.append(b'{"merchant": {"name": "shop-1"}, "amount": "12.50"')  # not JSON
            out.append(json.dumps({**payment, "cents": 1.5}).encode())  # cents not a long
    return out


def _valid(value: bytes) -> dict | None:
    """The payment as the declaration reads it, or None where the decoder must refuse it."""
    try:
        p = json.loads(value)
    except ValueError:
        return None
    merchant = (p.get("merchant") or {}).get("name")
    if not isinstance(merchant, str) or not merchant:
        return None
    if type(p.get("cents")) is not int or type(p.get("amount")) not in (int, float):
        return None
    refunded = p.get("refunded")
    if refunded is not None and type(refunded) is not bool:
        return None
    at = datetime.fromisoformat(p["created"])
    return {
        "event_time": int(at.timestamp() * 1000),
        "merchant": merchant,
        "amount": float(p["amount"]),
        "cents": p["cents"],
        "refunded": refunded,
        "country": (p.get("card") or {}).get("country"),
    }


def test_a_declared_topic_without_an_id_streams_archives_and_corrects(broker, tmp_path, spark):
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS, f"{topic}.dlq": 1})
    out = producer(broker.bootstrap)
    for i, value in enumerate(_payments(2_500)):
        out.send(topic, value=value, key=f"card-{i % 7}".encode())
    out.flush()
    out.close()

    # the oracle: what another client reads back from the topic
    records = read_records(broker.bootstrap, topic, PARTITIONS)
    ends = {p: rs[-1].offset + 1 for p, rs in records.items()}
    events = [e for rs in records.values() for r in rs if (e := _valid(r.value)) is not None]
    assert len(events) < sum(len(rs) for rs in records.values())  # some bad ones
    assert len(events) > len({json.dumps(e, sort_keys=True) for e in events})  # and retries

    views = parse_views(
        {
            "topics": [{**DECLARATION, "topic": topic}],
            "views": [
                {
                    "name": "by_merchant",
                    "topic": topic,
                    "grouping_cols": ["merchant"],
                    "interval": "10m",
                    "allowed_lateness": "1d",
                    "aggregation_info": AGGREGATIONS,
                },
                {
                    "name": "by_country",  # a nullable group: null is a group of its own
                    "topic": topic,
                    "grouping_cols": ["country"],
                    "interval": "10m",
                    "allowed_lateness": "1d",
                    "aggregation_info": AGGREGATIONS[:2],
                },
            ],
        }
    )
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
    )
    store = LocalObjectStore(settings.resolved_storage_root)
    worker = StreamWorker(
        "w0",
        [TaskId(topic, p) for p in range(PARTITIONS)],
        views,
        settings,
        open_worker_clients(broker.bootstrap, None, topic),
        store,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:

        def archived_to_the_end() -> bool:
            reached = Counter()
            for record in read_range_records(store, topic):
                reached[record.partition] = max(reached[record.partition], record.end)
            return all(reached[p] >= ends[p] for p in ends)

        wait_until(archived_to_the_end, 120, "the archive to cover every partition's records")
    finally:
        worker.stop_event.set()
        thread.join(60)
    assert not thread.is_alive()

    archived = [
        row
        for key in store.list("archive/events/")
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist()
    ]
    columns = ["event_time", "merchant", "amount", "cents", "refunded", "country"]
    assert sorted(tuple(str(r[c]) for c in columns) for r in archived) == sorted(
        tuple(str(e[c]) for c in columns) for e in events
    )

    tables = local_tables(store.root, tmp_path / "catalog.db")
    try:
        results = correct_hours(spark, store, views, archive_hours(store), tables=tables)
        assert results and not any(r.skipped for r in results)
        assert sum(r.events for r in results if r.view == "by_merchant") == len(events)
        assert all(r.duplicates_dropped == 0 for r in results)  # no id: nothing is dropped
        for view in views:
            col = view.grouping_cols[0]
            oracle: dict = {}
            for e in events:
                key = (e["event_time"] - e["event_time"] % WINDOW_MS, e[col])
                n, cents, biggest = oracle.get(key, (0, 0, float("-inf")))
                oracle[key] = (n + 1, cents + e["cents"], max(biggest, e["amount"]))
            if view.name == "by_country":
                oracle = {k: v[:2] for k, v in oracle.items()}
                assert any(k[1] is None for k in oracle)
            rows = tables.find(view.name).scan().to_arrow().to_pylist()
            names = [a["aggregated_col_name"] for a in AGGREGATIONS][
                : len(oracle[next(iter(oracle))])
            ]
            got = {
                (int(r["window_start"].timestamp() * 1000), r[col]): tuple(r[n] for n in names)
                for r in rows
            }
            assert got == oracle
    finally:
        tables.close()
