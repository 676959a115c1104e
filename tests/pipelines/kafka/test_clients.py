"""The reader and writer on both clients, against the real broker: what one writes, the other
reads back exactly (offsets, keys, values), ends and starts agree with an independent
kafka-python consumer, commits land in the group, delivery failures are not silent."""

from __future__ import annotations

import uuid

import pytest
from kafka import TopicPartition

from pipelines.config import KafkaSettings
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka import consumer, ensure_topics
from pipelines.kafka.reader import open_reader
from pipelines.kafka.writer import DeliveryFailures, open_writer
from tests.fixtures.processes import wait_until

pytestmark = pytest.mark.broker

CLIENTS = ["kafka-python", "confluent"]
PARTITIONS = 3


@pytest.mark.parametrize("writer_client", CLIENTS)
@pytest.mark.parametrize("reader_client", CLIENTS)
def test_what_one_client_writes_the_other_reads_exactly(
    broker, writer_client: str, reader_client: str
) -> None:
    topic = f"clients-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS})
    writer = open_writer(broker.bootstrap, KafkaSettings(client=writer_client))
    sent = [(f"k{i}".encode(), f'{{"n": {i}}}'.encode()) for i in range(3000)]
    sent.append((b"null-value", None))
    for key, value in sent:
        writer.send(topic, key, value)
    writer.flush()
    writer.close()

    reader = open_reader(broker.bootstrap, KafkaSettings(client=reader_client), f"g-{topic}")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    reader.assign({tp: 0 for tp in tps})
    got: dict[TopicPartition, list] = {tp: [] for tp in tps}

    def drained() -> bool:
        for tp, batch in reader.poll(0.2, 1000).items():
            got[tp].extend(
                zip(batch.offsets, batch.timestamps, batch.keys, batch.values, strict=True)
            )
        return sum(map(len, got.values())) >= len(sent)

    wait_until(drained, 60, "the reader to read everything", every_s=0)
    for records in got.values():
        assert [offset for offset, *_ in records] == list(range(len(records)))
        assert all(stamp > 0 for _, stamp, *_ in records)

    def order(kv):
        return kv[0], kv[1] or b""

    read = [(key, value) for rs in got.values() for _, _, key, value in rs]
    assert sorted(read, key=order) == sorted(sent, key=order)
    ends = reader.end_offsets(tps)
    assert ends == {tp: len(got[tp]) for tp in tps}
    assert reader.beginning_offsets(tps) == {tp: 0 for tp in tps}
    reader.commit(tps[0], 7)
    reader.close()

    independent = consumer(broker.bootstrap, group_id=f"g-{topic}")
    try:
        assert independent.committed(tps[0]) == 7
    finally:
        independent.close()


def test_a_writer_that_cannot_deliver_says_so() -> None:
    from pipelines.kafka import free_port

    # (kafka-python refuses at construction, after ~30 s of probing: its own behaviour)
    nowhere = f"127.0.0.1:{free_port()}"
    writer = open_writer(nowhere, KafkaSettings(client="confluent"))  # librdkafka: at delivery
    writer.send("nowhere", b"k", b"v")
    with pytest.raises(BrokerUnavailable, match="not delivered"):
        writer.flush(timeout_s=3)


def test_failed_deliveries_fail_one_flush_and_are_then_forgotten() -> None:
    """A stream worker's writer outlives a failed flush: its task replays from the checkpoint
    and sends those dead letters again, so a later flush must not fail for them once more."""
    failures = DeliveryFailures()
    failures.record("Broker: Message size too large")
    failures.record("Local: Message timed out")
    with pytest.raises(BrokerUnavailable, match="2 messages not delivered: Local: Message timed"):
        failures.raise_any()
    failures.raise_any()  # nothing failed since


def test_the_input_end_is_exact_or_an_error(broker, monkeypatch) -> None:
    """What ``sluice replay`` records as where its input ended: every partition's count of
    messages written (the listed end may be short on the embedded broker), and an error, not
    the listed end, when no fetch confirms it."""
    from pipelines.kafka import client as kafka_client

    topic = f"ends-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS})
    writer = kafka_client.producer(broker.bootstrap)
    written = {p: 0 for p in range(PARTITIONS)}
    for i in range(1, 400):  # batches of varied sizes per partition
        partition = i % PARTITIONS if i % 7 else 0
        writer.send(topic, value=f'{{"n": {i}}}'.encode(), partition=partition)
        written[partition] += 1
    writer.flush()
    writer.close()
    assert kafka_client.exact_end_offsets(broker.bootstrap, None, topic) == written

    monkeypatch.setattr(kafka_client, "fetched_log_end", lambda *a, **k: None)
    with pytest.raises(BrokerUnavailable, match=f"the end of {topic}-0: no fetch answered"):
        kafka_client.exact_end_offsets(broker.bootstrap, KafkaSettings(timeout_s=1), topic)
