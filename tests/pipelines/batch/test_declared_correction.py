"""The correction reads each topic's archive with its declaration: only that topic's files of an
hour (whose other files have other columns), an hour archived before a field was declared with
that field null, duplicates dropped by the declared id or every record kept without one, and
grouping columns landing in the table with their declared types. Oracles: plain Python over
the messages as the json module reads them."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.archive import ArchiveBuffer
from pipelines.batch import correct_hours
from pipelines.batch.archive import COPIES, list_hour_files, read_hours
from pipelines.config import SluiceSettings
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import NO_WATERMARK, RecordBatch
from pipelines.segments import HOUR_MS
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters, Record
from pipelines.views import parse_views
from tests.fixtures.tables import local_tables

pytestmark = pytest.mark.spark

HOUR = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS


def _payments(topic: str, *, id_: str | None = None, tip: bool = True) -> dict:
    fields = [
        {"name": "merchant", "type": "string", "path": "merchant.name"},
        {"name": "store", "type": "long"},
        {"name": "present", "type": "boolean"},
        {"name": "amount", "type": "double"},
        {"name": "cents", "type": "long"},
        {"name": "pid", "type": "string"},
    ]
    if tip:
        fields.append({"name": "tip", "type": "long", "nullable": True})
    declared = {
        "topic": topic,
        "event_time": {"path": "created", "format": "iso8601"},
        "fields": fields,
    }
    return declared if id_ is None else {**declared, "id": id_}


def _message(i: int, tip: bool = True) -> dict:
    at = datetime.fromtimestamp((HOUR + i * 11_000) / 1000, UTC).isoformat()
    message = {
        "merchant": {"name": f"m-{i % 3}"},
        "store": 10 + i % 4,
        "present": i % 3 == 0,
        "amount": i * 0.5,
        "cents": i * 50,
        "pid": f"p-{i}",
        "created": at,
    }
    if tip and i % 2:
        message["tip"] = i
    return message


def _archive(store, declared: dict, partition: int, first: int, messages: list[dict]) -> None:
    """Archive ``messages`` as a task would: the real decoder, the real writer."""
    declaration = TopicDeclaration.model_validate(declared)
    n = len(messages)
    values = [json.dumps(m).encode() for m in messages]
    records = RecordBatch(list(range(first, first + n)), [HOUR] * n, values, [None] * n)
    batch = decoder_for(declaration)(
        records,
        NO_WATERMARK,
        max_message_bytes=100_000,
        max_future_ms=10**12,
        partition=partition,
    )
    assert batch.dead_letters == []
    buffer = ArchiveBuffer(declaration.topic, partition, first, declaration=declaration)
    buffer.add(batch)
    buffer.write(store)


def test_a_topics_hour_is_read_with_its_schema_older_files_null_in_new_columns(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    old = [_message(i, tip=False) for i in range(40)]
    new = [_message(i) for i in range(40, 100)]
    _archive(store, _payments("pay", tip=False), 0, 0, old)  # before tip was declared
    _archive(store, _payments("pay"), 0, 40, new)
    # another topic in the same hour, whose name the file-name filter cannot tell from
    # "pay"'s, with other columns
    other = {"topic": "pay-1", "fields": [{"name": "note", "type": "string"}]}
    at = HOUR + 5
    _archive(store, other, 0, 0, [{"note": "x", "event_time": at}, {"note": "y", "event_time": at}])
    # and one it can: read by directory with the filter
    _archive(store, {**other, "topic": "payouts"}, 0, 0, [{"note": "z", "event_time": at}])
    listed = list_hour_files(store, [HOUR])
    assert len(listed[HOUR]) == 4

    for topic, expected in (("pay", old + new), ("payouts", [{"note": "z"}])):
        declared = _payments("pay") if topic == "pay" else {**other, "topic": topic}
        declaration = TopicDeclaration.model_validate(declared)
        rows = read_hours(spark, store, listed, "file", declaration).toPandas()
        assert set(rows["topic"]) == {topic}
        assert len(rows) == len(expected)
    declaration = TopicDeclaration.model_validate(_payments("pay"))
    rows = read_hours(spark, store, listed, "file", declaration).toArrow().to_pylist()
    got = {r["pid"]: r for r in rows}
    for m in old + new:
        row = got[m["pid"]]
        assert (row["merchant"], row["store"], row["present"], row["cents"]) == (
            m["merchant"]["name"],
            m["store"],
            m["present"],
            m["cents"],
        )
        assert row["tip"] == m.get("tip")  # None in the file archived before tip was declared


def test_duplicates_go_by_the_declared_id_and_without_one_every_record_counts(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    messages = [_message(i) for i in range(60)]
    retried = messages[10:20]  # a producer's retries: the same payments again
    for topic, id_ in (("with-id", "pid"), ("no-id", None)):
        _archive(store, _payments(topic, id_=id_), 0, 0, messages)
        _archive(store, _payments(topic, id_=id_), 1, 0, retried)
    listed = list_hour_files(store, [HOUR])
    for topic, id_, expected in (("with-id", "pid", 60), ("no-id", None, 70)):
        declaration = TopicDeclaration.model_validate(_payments(topic, id_=id_))
        rows = read_hours(spark, store, listed, "file", declaration).toPandas()
        assert len(rows) == expected
        copies = Counter(rows[COPIES])
        assert copies == ({1: 50, 2: 10} if id_ else {1: 70})
        if id_ is None:  # the record's place is kept: it orders events without an id
            assert {"partition", "offset"} <= set(rows.columns)


def test_a_null_id_identifies_nothing_so_each_such_record_counts_once(spark, tmp_path):
    """As the reconciliation counts them: null ids are never one another's duplicates."""
    store = LocalObjectStore(tmp_path)
    declared = _payments("pay", id_="ref")
    declared["fields"] = [*declared["fields"], {"name": "ref", "type": "string", "nullable": True}]
    messages = [{**_message(i), **({"ref": f"r-{i % 25}"} if i % 2 else {})} for i in range(60)]
    _archive(store, declared, 0, 0, messages)
    declaration = TopicDeclaration.model_validate(declared)
    rows = read_hours(spark, store, list_hour_files(store, [HOUR]), "file", declaration).toPandas()
    refs = [m["ref"] for m in messages if "ref" in m]
    assert rows["ref"].isna().sum() == 30  # every message without a ref, once
    assert len(rows) == 30 + len(set(refs))
    assert Counter(rows[COPIES]) == {1: 30 + 20, 2: 5}


def test_groups_by_a_boolean_and_a_long_land_in_the_table_with_their_types(spark, tmp_path):
    store = LocalObjectStore(tmp_path / "storage")
    messages = [_message(i) for i in range(200)]
    retried = messages[:30]
    declared = _payments("payments")  # no id: the retries count
    _archive(store, declared, 0, 0, messages)
    _archive(store, declared, 1, 0, retried)
    views = parse_views(
        {
            "topics": [declared],
            "views": [
                {
                    "name": f"by_{col}",
                    "topic": "payments",
                    "grouping_cols": [col],
                    "interval": "10m",
                    "aggregation_info": [
                        {"aggregation": "count", "aggregated_col_name": "n"},
                        {"aggregation": "sum", "col_name": "cents", "aggregated_col_name": "c"},
                        {"aggregation": "max", "col_name": "amount", "aggregated_col_name": "a"},
                    ],
                }
                for col in ("present", "store")
            ],
        }
    )
    tables = local_tables(store.root, tmp_path / "catalog.db")
    try:
        results = correct_hours(spark, store, views, [HOUR], tables=tables)
        assert results and all(r.version for r in results)
        assert [r.events for r in results] == [230, 230]  # no id: the 30 retries count
        assert all(r.duplicates_dropped == 0 for r in results)
        everything = messages + retried
        for view, col, kind in ((views[0], "present", pa.bool_()), (views[1], "store", pa.int64())):
            table = tables.find(view.name).scan().to_arrow()
            assert table.schema.field(col).type == kind
            oracle: dict = {}
            for m in everything:
                t = int(datetime.fromisoformat(m["created"]).timestamp() * 1000)
                key = (t - t % 600_000, m[col])
                n, c, a = oracle.get(key, (0, 0, float("-inf")))
                oracle[key] = (n + 1, c + m["cents"], max(a, m["amount"]))
            got = {
                (int(r["window_start"].timestamp() * 1000), r[col]): (r["n"], r["c"], r["a"])
                for r in table.to_pylist()
            }
            assert got == oracle
    finally:
        tables.close()


def test_sessions_of_a_topic_without_an_id_keep_every_record_in_kafka_order(spark, tmp_path):
    store = LocalObjectStore(tmp_path / "storage")
    declared = _payments("visits")
    pause = 600_000  # after every 40 messages: a new session of every merchant
    messages = []
    for i in range(120):
        m = _message(i)
        t = HOUR + i * 11_000 + (i // 40) * pause
        m["created"] = datetime.fromtimestamp(t / 1000, UTC).isoformat()
        messages.append(m)
    retried = messages[:10]
    _archive(store, declared, 0, 0, messages)
    _archive(store, declared, 1, 0, retried)
    (view,) = parse_views(
        {
            "topics": [declared],
            "views": [
                {
                    "name": "visits",
                    "kind": "session",
                    "topic": "visits",
                    "session_key": "merchant",
                    "gap": "2m",
                    "max_duration": "1h",
                    "kept_fields": ["cents"],
                    "max_kept_events": 3,
                    "aggregation_info": [
                        {"aggregation": "sum", "col_name": "cents", "aggregated_col_name": "c"}
                    ],
                }
            ],
        }
    )
    # the oracle: per merchant, in (event time, partition, offset) order, cut at a gap >= 2m
    records = [(m, 0, i) for i, m in enumerate(messages)] + [
        (m, 1, i) for i, m in enumerate(retried)
    ]
    by_key: dict = {}
    for m, partition, offset in records:
        t = int(datetime.fromisoformat(m["created"]).timestamp() * 1000)
        by_key.setdefault(m["merchant"]["name"], []).append((t, partition, offset, m["cents"]))
    oracle = {}
    for key, events in by_key.items():
        events.sort()
        session: list = []
        for event in events:
            if session and event[0] - session[-1][0] >= 120_000:
                oracle[(key, session[0][0])] = session
                session = []
            session.append(event)
        oracle[(key, session[0][0])] = session
    tables = local_tables(store.root, tmp_path / "catalog.db")
    try:
        (result,) = correct_hours(spark, store, [view], [HOUR], tables=tables)
        assert result.events == 130 and result.duplicates_dropped == 0
        rows = tables.find("visits").scan().to_arrow().to_pylist()
        got = {
            (r["merchant"], int(r["session_start"].timestamp() * 1000)): (
                r["event_count"],
                r["c"],
                [e["cents"] for e in json.loads(r["kept_events"])],
            )
            for r in rows
        }
        assert got == {
            k: (len(s), sum(e[3] for e in s), [e[3] for e in s[:3]]) for k, s in oracle.items()
        }
        assert len(got) == 9
    finally:
        tables.close()


def test_the_records_key_partition_offset_and_timestamp_are_archived_and_grouped_by(
    spark, tmp_path
):
    declared = {
        **_payments("cards"),
        "record": {"key": "card", "partition": "part", "offset": "at", "timestamp": "sent"},
    }
    (view,) = parse_views(
        {
            "topics": [declared],
            "views": [
                {
                    "name": "by_card",
                    "topic": "cards",
                    "grouping_cols": ["card"],
                    "interval": "1h",
                    "aggregation_info": [
                        {"aggregation": "count", "aggregated_col_name": "n"},
                        {"aggregation": "max", "col_name": "at", "aggregated_col_name": "last"},
                    ],
                }
            ],
        }
    )
    settings = SluiceSettings(state_dir=tmp_path)
    store = LocalObjectStore(settings.resolved_storage_root)
    records = [
        Record(i, HOUR + 7 * i, f"card-{i % 5}".encode(), json.dumps(_message(i)).encode())
        for i in range(150)
    ]
    task = StreamTask("cards", 3, [view], store, CollectingDeadLetters(), settings)
    task.start_at(0)
    task.process(records)
    task.flush()
    archived = [
        row
        for key in store.list("archive/events/")
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist()
    ]
    assert sorted((r["card"], r["part"], r["at"], r["sent"]) for r in archived) == sorted(
        (r.key.decode(), 3, r.offset, r.timestamp) for r in records
    )
    tables = local_tables(store.root, tmp_path / "catalog.db")
    try:
        correct_hours(spark, store, [view], [HOUR], tables=tables)
        rows = tables.find("by_card").scan().to_arrow().to_pylist()
        got = {r["card"]: (r["n"], r["last"]) for r in rows}
        cards = Counter(r.key.decode() for r in records)
        last = {c: max(r.offset for r in records if r.key.decode() == c) for c in cards}
        assert got == {c: (n, last[c]) for c, n in cards.items()}
    finally:
        tables.close()
