"""The topic sampler behind `sluice schema infer`, against a consumer stub that answers as
kafka-python does on the embedded broker: ListOffsets short of the log end (the last batch's
base offset + 1), the exact end in each fetch's high watermark, records partition after
partition, at most ``max_records`` a poll. The real broker runs it in
tests/orchestration/cli/test_schema_replay.py; here the order of answers is chosen."""

from __future__ import annotations

import time
from collections import namedtuple

import pytest
from kafka import TopicPartition

from pipelines.config import KafkaSettings
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka import sample
from pipelines.kafka.memory import MemoryBroker

TOPIC = "payments"
SIZES = (11, 7, 8, 5)  # what 31 keyless sends left on the embedded broker's 4 partitions
Record = namedtuple("Record", "offset value")


class StubConsumer:
    """kafka-python's KafkaConsumer as the sampler uses it, over a MemoryBroker.

    ``silent_polls``: polls that time out with no fetch answered (a loaded machine, a consumer
    still connecting); ``silent_after``: polls answered before the broker goes quiet."""

    def __init__(
        self, broker: MemoryBroker, silent_polls: int = 0, silent_after: int | None = None
    ):
        self.broker = broker
        self.config = {"request_timeout_ms": 1000}
        self.positions: dict[TopicPartition, int] = {}
        self.highwaters: dict[TopicPartition, int] = {}
        self.silent_polls = silent_polls
        self.silent_after = silent_after
        self.polls = 0
        self.answered: list[int] = []
        """max_records of each poll that was answered."""
        self.after_first_fetch = None
        self.closed = False

    def assign(self, tps):
        self.positions = dict.fromkeys(tps, 0)

    def assignment(self):
        return set(self.positions)

    def seek(self, tp, offset):
        self.positions[tp] = offset

    def position(self, tp):
        return self.positions[tp]

    def highwater(self, tp):
        return self.highwaters.get(tp)

    def beginning_offsets(self, tps, timeout_ms):
        return {tp: self.broker.bounds(tp)[0] for tp in tps}

    def end_offsets(self, tps, timeout_ms):
        """One batch a partition: its base offset + 1, as the embedded broker lists it."""
        return {tp: min(1, self.broker.bounds(tp)[1]) for tp in tps}

    def poll(self, timeout_ms, max_records):
        """One fetch answered a poll, of the next partition in turn: its end and records."""
        self.polls += 1
        quiet = self.silent_after is not None and len(self.answered) >= self.silent_after
        if self.polls <= self.silent_polls or quiet:
            time.sleep(timeout_ms / 1000)  # kafka-python waits out the poll's timeout
            return {}
        tps = list(self.positions)
        tp = tps[len(self.answered) % len(tps)]
        self.answered.append(max_records)
        self.highwaters[tp] = self.broker.bounds(tp)[1]
        if self.after_first_fetch is not None:
            self.after_first_fetch()
            self.after_first_fetch = None
        position = self.positions[tp]
        taken = self.broker.records(tp.topic, tp.partition)[position : position + max_records]
        if not taken:
            return {}
        self.positions[tp] = taken[-1].offset + 1
        return {tp: [Record(r.offset, r.value) for r in taken]}

    def close(self, timeout_ms):
        self.closed = True


@pytest.fixture
def topic() -> MemoryBroker:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, len(SIZES))
    for partition, size in enumerate(SIZES):
        for i in range(size):
            broker.send(TOPIC, None, f"{partition}-{i}".encode(), partition=partition)
    return broker


def _stub(monkeypatch, stub: StubConsumer) -> StubConsumer:
    monkeypatch.setattr(sample, "partitions_of", lambda *_: list(range(len(SIZES))))
    monkeypatch.setattr(sample, "consumer", lambda *_, **__: stub)
    return stub


def _all(broker: MemoryBroker) -> list[bytes]:
    return [r.value for p in range(len(SIZES)) for r in broker.records(TOPIC, p)]


@pytest.mark.parametrize("limit", [1, 4, 5, 30, 31])
def test_a_sample_is_as_long_as_asked_though_the_listed_ends_fall_short(
    topic, monkeypatch, limit
) -> None:
    stub = _stub(monkeypatch, StubConsumer(topic))
    got = list(sample.sample_topic("stub", None, TOPIC, limit))
    assert len(got) == limit and len(set(got)) == limit and set(got) <= set(_all(topic))
    assert stub.closed


def test_the_whole_topic_once_when_the_limit_is_larger(topic, monkeypatch) -> None:
    progress: list[tuple[int, int]] = []
    _stub(monkeypatch, StubConsumer(topic))
    got = list(sample.sample_topic("stub", None, TOPIC, 1000, lambda *p: progress.append(p)))
    assert sorted(got) == sorted(_all(topic))
    assert progress[-1] == (31, 31)


def test_records_written_after_reading_started_are_not_sampled(topic, monkeypatch) -> None:
    stub = _stub(monkeypatch, StubConsumer(topic))
    before = _all(topic)
    stub.after_first_fetch = lambda: topic.send(TOPIC, None, b"late", partition=0)
    assert sorted(sample.sample_topic("stub", None, TOPIC, 1000)) == sorted(before)


def test_fetches_slow_to_answer_still_give_the_whole_sample(topic, monkeypatch) -> None:
    _stub(monkeypatch, StubConsumer(topic, silent_polls=3))
    assert len(list(sample.sample_topic("stub", KafkaSettings(timeout_s=5), TOPIC, 5))) == 5


def test_a_broker_gone_quiet_mid_sample_is_an_error_not_a_short_sample(topic, monkeypatch) -> None:
    stub = _stub(monkeypatch, StubConsumer(topic, silent_after=1))
    got: list[bytes | None] = []
    with pytest.raises(BrokerUnavailable, match=r"partitions 1, 2, 3 brought neither"):
        got.extend(sample.sample_topic("stub", KafkaSettings(timeout_s=1), TOPIC, 20))
    assert stub.answered == [20] and got == [r.value for r in topic.records(TOPIC, 0)]
