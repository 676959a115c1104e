"""One way to get a SparkSession and to name storage objects in a way Spark can read them.

The session comes from :class:`SparkSettings` alone, so the batch job runs unchanged on
``local[2]``, a standalone cluster, EMR (``yarn``) or Kubernetes; only the master and the
extra configuration differ.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.batch.config import SparkSettings
from pipelines.storage import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BYTES_PER_SHUFFLE_PARTITION",
    "build_spark",
    "fit_shuffle_partitions",
    "shuffle_partitions_kept",
    "spark_conf",
    "spark_uri",
    "submitted",
]

log = logging.getLogger(__name__)

CODEGEN_CACHE_ENTRIES = 2000
"""Generated classes Spark keeps compiled (``spark.sql.codegen.cache.maxEntries``)."""
LOCAL_FILE_OPEN_COST = 256 * 1024
"""``spark.sql.files.openCostInBytes`` on local masters (Spark's default: 4 MB)."""
BYTES_PER_SHUFFLE_PARTITION = 6 * 1024 * 1024
"""Archive bytes per shuffle partition a local correction fits to its input (about 250,000
events; see :func:`fit_shuffle_partitions`)."""
_FIT_KEY = "spark.sluice.shuffle.bytesPerPartition"
"""Set on sessions whose shuffle partitions a correction may fit: local masters with
Sluice's default, never a cluster or an explicit ``SLUICE_SPARK_SHUFFLE_PARTITIONS``."""
_MOST_KEY = "spark.sluice.shuffle.maxPartitions"
"""The most partitions a fitted correction gets: Sluice's local default (4 per core)."""


def submitted() -> bool:
    """True when spark-submit (or the pyspark shell) launched this Python driver.

    The JVM is then already configured by spark-submit's flags and spark-defaults.conf
    (``--master yarn`` on EMR), and only what the user set explicitly may override it.
    """
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_conf(
    settings: SparkSettings, s3_endpoint_url: str | None = None, *, under_submit: bool = False
) -> dict[str, str]:
    """Every configuration entry the session gets, so callers and docs can show them.

    ``under_submit`` keeps only the entries that never conflict with a cluster's setup plus
    the ones set explicitly (environment or arguments): a default such as driver host
    127.0.0.1 would break YARN client mode.
    """
    explicit = settings.model_fields_set
    conf = {
        "spark.ui.showConsoleProgress": "false",  # progress bars garble logs and the CLI
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A correction generates a few hundred classes (one per stage, projection and
        # ordering of every view); with Spark's default of 100 cached, each run would
        # compile most of them again and the JIT then the new classes, costing the JVM as
        # much CPU as the tasks themselves.
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
    }
    local = settings.is_local and (not under_submit or "master" in explicit)

    def wanted(name: str) -> bool:
        return not under_submit or name in explicit

    if wanted("master"):
        conf["spark.master"] = settings.master
    if wanted("app_name"):
        conf["spark.app.name"] = settings.app_name
    if wanted("ui_enabled"):
        conf["spark.ui.enabled"] = str(settings.ui_enabled).lower()
    if wanted("python"):
        conf["spark.pyspark.python"] = settings.python
    if settings.driver_host and wanted("driver_host"):
        conf["spark.driver.host"] = settings.driver_host
    elif local:
        conf["spark.driver.host"] = "127.0.0.1"
    if settings.driver_memory and wanted("driver_memory"):
        conf["spark.driver.memory"] = settings.driver_memory
    if settings.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions)
    elif local:
        conf["spark.sql.shuffle.partitions"] = str(4 * settings.local_cores())
        conf[_FIT_KEY] = str(BYTES_PER_SHUFFLE_PARTITION)
        conf[_MOST_KEY] = conf["spark.sql.shuffle.partitions"]
    if local:
        # Adaptive execution runs every shuffle stage as a job of its own and re-plans
        # between them, and on a small machine each job costs the same whatever its size.
        # Without it a correction runs about a third as many jobs, and the partitions it
        # would have coalesced are fitted to the input instead (fit_shuffle_partitions);
        # small corrections are faster and large ones no slower (docs/benchmarks.md).
        # Clusters keep it: skew and sizes vary there.
        conf["spark.sql.adaptive.enabled"] = "false"
        # The correction caches its deduplicated events once per run; compressing Spark's
        # columnar cache doubles the cost of building it for no gain at one machine's
        # sizes. Clusters keep Spark's default.
        conf["spark.sql.inMemoryColumnarStorage.compressed"] = "false"
        # Opening a local file is cheap, but Spark plans every file as if it were 4 MB
        # more data, so a day's small archive files would become many tasks per scan and
        # many cached partitions that every view then reads task by task. At 256 KB the
        # files pack into one task per core.
        conf["spark.sql.files.openCostInBytes"] = str(LOCAL_FILE_OPEN_COST)
    if s3_endpoint_url:
        # S3-compatible stores (MinIO, moto) need path-style addressing.
        conf["spark.hadoop.fs.s3a.endpoint"] = s3_endpoint_url
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
    conf.update(settings.conf)
    return conf


def build_spark(
    settings: SparkSettings | None = None, s3_endpoint_url: str | None = None
) -> SparkSession:
    """The session for the batch job; reuses a running one (``getOrCreate``), or connects to
    ``settings.remote`` (Spark Connect) when set.

    ``PYSPARK_PYTHON`` is set to the configured interpreter when unset, so Python workers
    (if any) run in the same environment, with pyarrow. Under spark-submit the submitted
    configuration wins over Sluice's defaults (see :func:`spark_conf`).
    """
    from pyspark.sql import SparkSession

    settings = settings or SparkSettings()
    if settings.remote:
        # A Spark Connect server: started with the project's configuration (orchestration's
        # spark_server), so this session only connects; nothing here starts a JVM.
        spark = SparkSession.builder.remote(settings.remote).getOrCreate()
        log.info("Spark %s session through Spark Connect at %s", spark.version, settings.remote)
        return spark
    under_submit = submitted()
    if not under_submit:
        os.environ.setdefault("PYSPARK_PYTHON", settings.python)
    builder = SparkSession.builder
    for key, value in spark_conf(settings, s3_endpoint_url, under_submit=under_submit).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    log.info("Spark %s session on %s", spark.version, spark.sparkContext.master)
    return spark


def fit_shuffle_partitions(spark: SparkSession, input_bytes: int | None) -> int | None:
    """Shuffle partitions for a correction reading ``input_bytes`` of archive: one per
    :data:`BYTES_PER_SHUFFLE_PARTITION`, at most Sluice's local default (4 per core), at
    least 1. Only on sessions Sluice configured for it (a local master, partitions not set
    explicitly); elsewhere, or with the size unknown (S3), the session is left alone.

    Set for the session (Spark Connect: the client's own session), so call it inside
    :func:`shuffle_partitions_kept`. Returns what it set, or None."""
    bytes_per, most = spark.conf.get(_FIT_KEY, None), spark.conf.get(_MOST_KEY, None)
    if not bytes_per or not most or input_bytes is None:
        return None
    partitions = max(1, min(int(most), -(-input_bytes // int(bytes_per))))
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    log.info("%d shuffle partition(s) for %.1f MB of archive", partitions, input_bytes / 2**20)
    return partitions


@contextmanager
def shuffle_partitions_kept(spark: SparkSession) -> Iterator[None]:
    """Restore the session's shuffle partitions afterwards: a local session is shared by
    every correction of the process (tests, the CLI, benchmarks)."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        yield
    finally:
        with suppress(Exception):  # a lost Spark Connect server: not to hide why it failed
            spark.conf.set("spark.sql.shuffle.partitions", before)


def spark_uri(store: ObjectStore, key: str, s3_scheme: str = "s3a") -> str:
    """Where Spark reads ``key``: ``s3a://`` (or EMRFS ``s3://``) for S3, ``file://`` locally.

    Local paths get an explicit ``file://`` so a cluster whose default filesystem is HDFS
    does not look for them there.
    """
    uri = store.uri(key)
    if uri.startswith("s3://"):
        return f"{s3_scheme}://{uri.removeprefix('s3://')}"
    if "://" not in uri:
        # Not Path.as_uri(): it percent-encodes "=" in hour=..., which Hadoop keeps literally.
        return f"file://{Path(uri).resolve()}"
    return uri
