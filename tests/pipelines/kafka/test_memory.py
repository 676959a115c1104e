"""The in-memory broker keeps the reader's rules a worker relies on: columns by partition in
ascending offsets, at most ``max_records`` a poll, exact ends, commits per group, and a position
out of the log's range restarting at the log start."""

from __future__ import annotations

import threading
import time

from kafka import TopicPartition

from pipelines.kafka.memory import MemoryBroker

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def _broker() -> MemoryBroker:
    broker = MemoryBroker()
    broker.create_topic("t", 2)
    for i in range(5):
        broker.send("t", f"k{i}".encode(), f"v{i}".encode(), partition=0, timestamp_ms=1000 + i)
    broker.send("t", None, b"w0", partition=1)
    return broker


def test_polls_hand_out_each_record_once_in_offset_order_within_max_records() -> None:
    reader = _broker().reader("g")
    reader.assign({A: 1, B: 0})
    got: dict[TopicPartition, list] = {A: [], B: []}
    for _ in range(4):
        polled = reader.poll(0.0, 2)
        assert sum(map(len, polled.values())) <= 2
        for tp, batch in polled.items():
            got[tp] += zip(batch.offsets, batch.timestamps, batch.keys, batch.values, strict=True)
    assert got[A] == [(i, 1000 + i, f"k{i}".encode(), f"v{i}".encode()) for i in range(1, 5)]
    assert [(offset, value) for offset, _, _, value in got[B]] == [(0, b"w0")]
    assert reader.poll(0.0, 10) == {}


def test_ends_commits_and_a_position_out_of_range() -> None:
    broker = _broker()
    reader = broker.reader("g")
    assert reader.end_offsets([A, B]) == {A: 5, B: 1}
    assert reader.fetched_end(A, 99) == 5
    broker.delete_records("t", 0, before=3)
    assert reader.beginning_offsets([A, B]) == {A: 3, B: 0}
    assert [r.offset for r in broker.records("t", 0)] == [3, 4]
    reader.assign({A: 1})  # deleted by retention: restarts at the log start
    assert reader.poll(0.0, 10)[A].offsets == [3, 4]
    reader.assign({A: 50})  # past the end: the log start too
    assert reader.poll(0.0, 10)[A].offsets == [3, 4]
    reader.commit(A, 4)
    assert broker.committed == {("g", A): 4}


def test_a_poll_waits_for_a_record_sent_meanwhile() -> None:
    broker = _broker()
    reader = broker.reader("g")
    reader.assign({B: 1})
    threading.Timer(0.1, lambda: broker.send("t", None, b"late", partition=1)).start()
    started = time.monotonic()
    polled = reader.poll(5.0, 10)
    assert polled[B].values == [b"late"] and time.monotonic() - started < 4


def test_the_writer_appends_to_the_topic() -> None:
    broker = MemoryBroker()
    writer = broker.writer()
    writer.send("dlq", b"k", b"v")
    writer.flush()
    assert [(r.offset, r.key, r.value) for r in broker.records("dlq", 0)] == [(0, b"k", b"v")]


def test_keys_and_headers_are_read_with_their_records() -> None:
    broker = MemoryBroker()
    broker.send("h", b"k0", b"v0", headers=[("region", b"eu"), ("empty", None)])
    broker.send("h", None, b"v1")
    broker.send("h", b"k2", b"v2", headers=[("region", b"us")])
    reader = broker.reader("g")
    reader.assign({TopicPartition("h", 0): 0})
    batch = reader.poll(0.0, 10)[TopicPartition("h", 0)]
    assert batch.keys == [b"k0", None, b"k2"]
    assert [list(h) for h in batch.headers] == [
        [("region", b"eu"), ("empty", None)],
        [],
        [("region", b"us")],
    ]
    assert batch.take([2]).headers == [batch.headers[2]] and batch.take([2]).keys == [b"k2"]
    assert batch.slice(1, 3).headers == batch.headers[1:3]
