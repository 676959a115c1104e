"""Spark as a Dagster resource: the session the hourly correction runs in.

Locally a ``local[2]`` session built from the ``SLUICE_SPARK_*`` settings by the data plane;
on a cluster (EMR, standalone, Kubernetes) dagster-pyspark's ``PySparkResource`` with the
cluster's Spark configuration. Either way one session per run process, so a backfill of
many hours (one run, see ``BackfillPolicy.single_run``) pays Spark's start-up once.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster_pyspark import PySparkResource
from pydantic import Field

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ClusterSparkResource", "LocalSparkResource", "SparkResource"]


class SparkResource(dg.ConfigurableResource):
    """Hands out the run's SparkSession."""

    @abstractmethod
    def get_session(self) -> SparkSession:
        """The (shared) session of this process."""

    def s3_scheme(self) -> str:
        """How this Spark reads ``s3://`` storage roots: ``s3a`` (hadoop-aws) or ``s3`` (EMRFS)."""
        return "s3a"


class LocalSparkResource(SparkResource):
    """A session on this machine. Unset fields fall back to ``SLUICE_SPARK_*``; the code
    location fills them from those settings so the resources page shows what runs use."""

    master: str | None = Field(default=None, description="Spark master, e.g. local[2].")
    driver_memory: str | None = Field(default=None, description="Driver JVM heap, e.g. 2g.")
    shuffle_partitions: int | None = Field(
        default=None, description="spark.sql.shuffle.partitions (unset: Spark's default)."
    )
    s3_read_scheme: str | None = Field(
        default=None, description="s3a (hadoop-aws) or s3 (EMRFS) for s3:// storage roots."
    )

    @classmethod
    def from_settings(cls) -> LocalSparkResource:
        from pipelines.batch.config import SparkSettings

        spark = SparkSettings()
        return cls(
            master=spark.master,
            driver_memory=spark.driver_memory,
            shuffle_partitions=spark.shuffle_partitions,
            s3_read_scheme=spark.s3_scheme,
        )

    def _spark_settings(self):
        from pipelines.batch.config import SparkSettings

        fields = {
            "master": self.master,
            "driver_memory": self.driver_memory,
            "shuffle_partitions": self.shuffle_partitions,
            "s3_scheme": self.s3_read_scheme,
        }
        return SparkSettings().model_copy(update={k: v for k, v in fields.items() if v is not None})

    def get_session(self) -> SparkSession:
        from pipelines.batch.spark import build_spark
        from pipelines.config import get_settings

        return build_spark(self._spark_settings(), s3_endpoint_url=get_settings().s3_endpoint_url)

    def s3_scheme(self) -> str:
        return self._spark_settings().s3_scheme


class ClusterSparkResource(SparkResource):
    """A cluster session through dagster-pyspark (EMR: ``spark.master=yarn``)."""

    pyspark: PySparkResource = Field(
        default_factory=lambda: PySparkResource(spark_config={}),
        description="dagster-pyspark resource holding the cluster's spark_config.",
    )
    s3_read_scheme: str = Field(default="s3", description="s3 (EMRFS) or s3a (hadoop-aws).")

    def s3_scheme(self) -> str:
        return self.s3_read_scheme

    def get_session(self) -> SparkSession:
        session: Any = self.pyspark.spark_session
        if session is None:  # not set up by Dagster (e.g. called outside a run)
            from dagster_pyspark.resources import spark_session_from_config

            session = spark_session_from_config(self.pyspark.spark_config)
        return session
