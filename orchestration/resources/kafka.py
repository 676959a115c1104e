"""Kafka as a Dagster resource: how to reach the cluster that carries the ``events`` topic.

Locally that is the embedded broker started by ``sluice broker`` / ``sluice up``; in
production the bootstrap servers and SASL credentials of a real cluster (MSK).
"""

from __future__ import annotations

from abc import abstractmethod

import dagster as dg
from kafka import TopicPartition
from pydantic import Field

from pipelines.config import KafkaSettings, get_settings
from pipelines.kafka import consumer, end_offsets, partitions_of, resolve_bootstrap

__all__ = ["ClusterKafkaResource", "EmbeddedKafkaResource", "KafkaResource"]


class KafkaResource(dg.ConfigurableResource):
    """Bootstrap servers and client settings; assets never build clients themselves."""

    @abstractmethod
    def bootstrap(self) -> str:
        """host:port[,host:port] of the cluster."""

    @abstractmethod
    def client_settings(self) -> KafkaSettings:
        """Security settings for kafka-python clients."""

    def topic_end_offsets(self, topic: str) -> dict[int, int]:
        """Log-end offset per partition of ``topic`` (what has been produced so far)."""
        settings = self.client_settings()
        partitions = partitions_of(self.bootstrap(), settings, topic)
        client = consumer(self.bootstrap(), settings)
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            return {tp.partition: offset for tp, offset in end_offsets(client, tps).items()}
        finally:
            client.close()


class EmbeddedKafkaResource(KafkaResource):
    """The embedded broker of the state directory, or ``KAFKA_BOOTSTRAP_SERVERS`` if set."""

    def bootstrap(self) -> str:
        return resolve_bootstrap(get_settings(), KafkaSettings())

    def client_settings(self) -> KafkaSettings:
        return KafkaSettings()


class ClusterKafkaResource(KafkaResource):
    """A real cluster (MSK): bootstrap servers and SASL credentials from the environment."""

    bootstrap_servers: str = Field(description="host:port[,host:port].")
    security_protocol: str = Field(default="SASL_SSL", description="PLAINTEXT, SSL, SASL_SSL...")
    sasl_mechanism: str | None = Field(default="SCRAM-SHA-512", description="SASL mechanism.")
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: str | None = Field(default=None, description="SASL password (an EnvVar).")

    def bootstrap(self) -> str:
        return self.bootstrap_servers

    def client_settings(self) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers,
            security_protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
        )
