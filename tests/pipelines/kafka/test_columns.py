"""A poll's librdkafka messages as columns per partition: the one-map-per-field builder gives
exactly the batches of the per-message loop, on any interleaving of partitions, topics,
errors, empty keys and values, headers or none."""

from __future__ import annotations

import confluent_kafka as ck
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.kafka.columns import by_partition, by_partition_each

_ERROR = ck.KafkaError(ck.KafkaError._PARTITION_EOF)


@st.composite
def _messages(draw, topics: list[str]) -> list[ck.Message]:
    """Runs of one partition, as librdkafka hands them out, sometimes an error or a second
    topic among them; offsets ascend per partition."""
    out: list[ck.Message] = []
    next_offset: dict[tuple[str, int], int] = {}
    for _ in range(draw(st.integers(0, 8))):
        topic = draw(st.sampled_from(topics))
        partition = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(1, 4))):
            if draw(st.integers(0, 30)) == 0:
                out.append(ck.Message(topic=topic, partition=partition, error=_ERROR))
                continue
            offset = next_offset.get((topic, partition), draw(st.integers(0, 100)))
            next_offset[(topic, partition)] = offset + 1
            value = draw(st.one_of(st.none(), st.binary(max_size=8)))
            key = draw(st.one_of(st.none(), st.binary(max_size=4)))
            stamp = (ck.TIMESTAMP_CREATE_TIME, draw(st.integers(0, 2**41)))
            headers = draw(
                st.one_of(
                    st.none(),
                    st.lists(
                        st.tuples(st.sampled_from(["a", "b"]), st.one_of(st.none(), st.binary())),
                        max_size=3,
                    ),
                )
            )
            out.append(
                ck.Message(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    key=key,
                    value=value,
                    timestamp=stamp,
                    headers=headers,
                )
            )
    return out


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([["t"], ["t", "u"]]).flatmap(_messages))
def test_the_column_builder_equals_the_per_message_loop(messages):
    expected = by_partition_each(messages)
    assert by_partition(messages) == expected
    assert sum(map(len, expected.values())) == sum(m.error() is None for m in messages)
    for tp, batch in expected.items():  # consumed order kept within each partition
        mine = [m for m in messages if m.error() is None and (m.topic(), m.partition()) == tp]
        assert batch.offsets == [m.offset() for m in mine]
        assert batch.timestamps == [m.timestamp()[1] for m in mine]
        assert batch.values == [m.value() for m in mine] and batch.keys == [m.key() for m in mine]
        assert batch.headers == [m.headers() for m in mine]


def test_a_poll_of_one_topic_without_errors_takes_the_column_builder(monkeypatch):
    import pipelines.kafka.columns as columns

    def refuse(_messages):
        raise AssertionError("the per-message path was taken")

    monkeypatch.setattr(columns, "by_partition_each", refuse)
    messages = [
        ck.Message(topic="t", partition=p, offset=o, value=b"v", timestamp=(1, o))
        for p, o in [(0, 5), (0, 6), (2, 1), (0, 7)]
    ]
    batches = columns.by_partition(messages)
    assert {tp.partition: b.offsets for tp, b in batches.items()} == {0: [5, 6, 7], 2: [1]}
