"""Spark settings of the batch correction: one model, read from ``SLUICE_SPARK_*`` variables.

The defaults run Spark inside the calling process (``local[2]``); pointing ``master`` at a
standalone, YARN (EMR) or Kubernetes cluster is the only change the same code needs.
"""

from __future__ import annotations

import os
import sys

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pipelines.settings import SluiceBaseSettings

__all__ = ["SparkSettings"]


class SparkSettings(SluiceBaseSettings):
    """How the batch correction gets its SparkSession."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_SPARK_", extra="ignore")

    master: str = Field(
        default="local[2]",
        description="Spark master URL: local[N], spark://host:7077, yarn (EMR) or k8s://https://...",
    )
    app_name: str = Field(default="sluice-batch", description="Application name shown by Spark.")
    driver_host: str | None = Field(
        default=None,
        description="Address executors reach the driver at; unset = 127.0.0.1 for local masters, "
        "Spark's own choice on clusters.",
    )
    driver_memory: str | None = Field(
        default="2g",
        description="spark.driver.memory (only effective when this process starts the JVM).",
    )
    shuffle_partitions: int | None = Field(
        default=None,
        ge=1,
        description="spark.sql.shuffle.partitions; unset = on local masters, each correction "
        "fits it to its input (one per 6 MB of archive, at most 4 per core; adaptive "
        "execution off), Spark's default on clusters.",
    )
    ui_enabled: bool = Field(default=False, description="Start the Spark web UI (port 4040+).")
    log_level: str = Field(default="WARN", description="Log level of the JVM side of Spark.")
    python: str = Field(
        default=sys.executable,
        description="PYSPARK_PYTHON for Python workers; default the interpreter running Sluice.",
    )
    s3_scheme: str = Field(
        default="s3a",
        description="Scheme Spark reads s3:// storage roots with: s3a (hadoop-aws) or s3 (EMRFS).",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect URL (sc://host:port) the correction runs on instead of "
        "starting Spark; the Dagster launch sets it to the warm server of `sluice up` / "
        "`sluice spark start` when that runs.",
    )
    connect: bool = Field(
        default=True,
        description="Corrections launched by Dagster use the warm Spark Connect server when "
        "it runs (else spark-submit), and `sluice up` starts one.",
    )
    warm_up: bool = Field(
        default=True,
        description="A started Spark Connect server first corrects a few thousand synthetic "
        "events in a process of its own, so that the JVM has compiled Spark's hot paths before "
        "the first real correction, which would otherwise be markedly slower.",
    )
    connect_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of the Spark Connect server `sluice up` / `sluice spark start` run on "
        "127.0.0.1; unset = a free port (recorded in <state_dir>/spark-connect.json).",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description='Extra Spark configuration, JSON in the environment: {"spark.executor.memory": "4g"}.',
    )

    @property
    def is_local(self) -> bool:
        return self.master.startswith("local")

    def local_cores(self) -> int:
        """Cores of a ``local[N]`` / ``local[*]`` master (1 for plain ``local``)."""
        inside = self.master.partition("[")[2].partition("]")[0].split(",")[0]
        if inside == "*":
            return os.cpu_count() or 1
        return int(inside) if inside.isdigit() else 1
