"""The events_offsets sensor against the real embedded broker: offsets per partition, the
write rate between ticks, nothing recorded while the topic stands still, a skip (not a
failure) when the broker does not answer."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.constants import EVENTS_KEY
from orchestration.resources.kafka import ClusterKafkaResource
from orchestration.sensors import make_events_sensor
from pipelines.kafka import ensure_topics, producer

pytestmark = pytest.mark.broker


def test_events_are_observed_with_offsets_and_rate(broker, topic_name, monkeypatch) -> None:
    monkeypatch.setenv("SLUICE_TOPIC", topic_name)
    from pipelines.config import get_settings

    get_settings.cache_clear()
    try:
        ensure_topics(broker.bootstrap, {topic_name: 2})
        send = producer(broker.bootstrap)
        for i in range(30):
            send.send(topic_name, key=b"k%d" % (i % 5), value=b"{}", partition=i % 2)
        send.flush()
        kafka = ClusterKafkaResource(
            bootstrap_servers=broker.bootstrap, security_protocol="PLAINTEXT", sasl_mechanism=None
        )
        clock = iter([100.0, 110.0, 120.0]).__next__
        sensor = make_events_sensor(clock=clock)
        with dg.build_sensor_context(resources={"kafka": kafka}) as ctx:
            first = sensor.evaluate_tick(ctx)
        (observation,) = first.asset_events
        assert observation.asset_key == EVENTS_KEY
        assert observation.metadata["end_offsets"].value == {"0": 15, "1": 15}
        assert observation.metadata["messages_written"].value == 30
        for _ in range(20):
            send.send(topic_name, value=b"{}", partition=0)
        send.flush()
        send.close()
        with dg.build_sensor_context(resources={"kafka": kafka}, cursor=first.cursor) as ctx:
            second = sensor.evaluate_tick(ctx)
        (observation,) = second.asset_events
        assert observation.metadata["end_offsets"].value == {"0": 35, "1": 15}
        assert observation.metadata["rate_per_s"].value == pytest.approx(2.0)  # 20 in 10 s
        with dg.build_sensor_context(resources={"kafka": kafka}, cursor=second.cursor) as ctx:
            still = sensor.evaluate_tick(ctx)
        assert not still.asset_events and "nothing written" in still.skip_message
        monkeypatch.setenv("SLUICE_KAFKA_TIMEOUT_S", "1")  # a broker gone: a short deadline
        gone = ClusterKafkaResource(
            bootstrap_servers="127.0.0.1:9", security_protocol="PLAINTEXT", sasl_mechanism=None
        )
        with dg.build_sensor_context(resources={"kafka": gone}) as ctx:
            skipped = sensor.evaluate_tick(ctx)
        assert not skipped.asset_events and "cannot read" in skipped.skip_message
    finally:
        get_settings.cache_clear()
