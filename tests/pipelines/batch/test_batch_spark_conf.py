"""Spark settings -> configuration, without starting Spark."""

from __future__ import annotations

import sys

import pytest

from pipelines.batch import SparkSettings, spark_conf, spark_uri
from pipelines.batch.spark import BYTES_PER_SHUFFLE_PARTITION
from pipelines.storage import LocalObjectStore, ObjectStore


def test_local_defaults_follow_facts_md():
    conf = spark_conf(SparkSettings())
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    # One job per query, and the partitions fitted to each correction's input instead.
    assert conf["spark.sql.adaptive.enabled"] == "false"
    assert int(conf["spark.sluice.shuffle.bytesPerPartition"]) == BYTES_PER_SHUFFLE_PARTITION
    assert conf["spark.sluice.shuffle.maxPartitions"] == "8"
    assert conf["spark.pyspark.python"] == sys.executable
    # Small local archive files pack into one task per core instead of one per 4 MB.
    assert int(conf["spark.sql.files.openCostInBytes"]) < 4 * 1024 * 1024


def test_cluster_masters_keep_sparks_own_choices():
    conf = spark_conf(SparkSettings(master="yarn"))
    assert conf["spark.master"] == "yarn"
    assert "spark.driver.host" not in conf
    assert "spark.sql.shuffle.partitions" not in conf
    assert "spark.sql.files.openCostInBytes" not in conf  # opening an S3 object is not cheap
    assert "spark.sql.adaptive.enabled" not in conf
    assert "spark.sluice.shuffle.bytesPerPartition" not in conf


def test_under_spark_submit_only_explicit_settings_override(monkeypatch):
    monkeypatch.delenv("SLUICE_SPARK_MASTER", raising=False)
    conf = spark_conf(SparkSettings(), under_submit=True)
    for key in ("spark.master", "spark.driver.host", "spark.driver.memory", "spark.app.name"):
        assert key not in conf
    # Never conflicts with a cluster's setup, and a warm session then stops recompiling.
    assert int(conf["spark.sql.codegen.cache.maxEntries"]) >= 1000
    explicit = spark_conf(SparkSettings(shuffle_partitions=64, app_name="x"), under_submit=True)
    assert explicit["spark.sql.shuffle.partitions"] == "64"
    assert "spark.sluice.shuffle.bytesPerPartition" not in explicit  # an explicit count stays
    assert explicit["spark.app.name"] == "x"


def test_environment_and_extra_conf(monkeypatch):
    monkeypatch.setenv("SLUICE_SPARK_MASTER", "spark://h:7077")
    monkeypatch.setenv("SLUICE_SPARK_CONF", '{"spark.executor.memory": "4g"}')
    conf = spark_conf(SparkSettings(), s3_endpoint_url="http://127.0.0.1:9000")
    assert conf["spark.master"] == "spark://h:7077"
    assert conf["spark.executor.memory"] == "4g"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"


class _S3Like(ObjectStore):
    root = "s3://bucket/prefix"
    put = get = list = delete = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("scheme", "expected"), [("s3a", "s3a://bucket/prefix/k"), ("s3", "s3://bucket/prefix/k")]
)
def test_spark_uri_maps_s3_roots(scheme, expected):
    assert spark_uri(_S3Like.__new__(_S3Like), "k", scheme) == expected


def test_spark_uri_keeps_hive_style_names_literal(tmp_path):
    uri = spark_uri(LocalObjectStore(tmp_path), "archive/events/hour=2015-02-26T21/")
    assert uri == f"file://{tmp_path.resolve()}/archive/events/hour=2015-02-26T21"


def test_a_correction_fits_its_shuffle_partitions_to_its_input_and_restores_them(spark):
    """Only a session Sluice marked for it is fitted (the session is shared: another test's
    ``build_spark`` may have marked it, so the marks are saved and set here), and the count
    comes back afterwards."""
    from pipelines.batch.spark import fit_shuffle_partitions, shuffle_partitions_kept

    keys = ["spark.sluice.shuffle.bytesPerPartition", "spark.sluice.shuffle.maxPartitions"]
    saved = {k: spark.conf.get(k, None) for k in [*keys, "spark.sql.shuffle.partitions"]}
    try:
        for key in keys:
            spark.conf.unset(key)
        assert fit_shuffle_partitions(spark, 10**9) is None  # not marked: left alone
        spark.conf.set("spark.sql.shuffle.partitions", "8")
        spark.conf.set(keys[0], str(BYTES_PER_SHUFFLE_PARTITION))
        spark.conf.set(keys[1], "8")
        with shuffle_partitions_kept(spark):
            assert fit_shuffle_partitions(spark, 200_000) == 1
            assert spark.conf.get("spark.sql.shuffle.partitions") == "1"
            assert fit_shuffle_partitions(spark, 3 * BYTES_PER_SHUFFLE_PARTITION + 1) == 4
            assert fit_shuffle_partitions(spark, 10**12) == 8  # never above the session's
            assert fit_shuffle_partitions(spark, None) is None  # size unknown (S3)
        assert spark.conf.get("spark.sql.shuffle.partitions") == "8"
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def test_archive_bytes_are_known_locally_and_unknown_on_a_store_that_cannot_say(tmp_path):
    from pipelines.batch.archive import archive_bytes

    store = LocalObjectStore(tmp_path)
    store.put("a/x.parquet", b"12345")
    store.put("b/y.parquet", b"123")
    assert store.size("a/x.parquet") == 5 and store.size("missing") is None
    assert archive_bytes(store, {0: ["a/x.parquet"], 1: ["b/y.parquet"]}) == 8

    class Remote(LocalObjectStore):  # S3: sizes would cost a request per file
        def size(self, key: str) -> int | None:
            return None

    assert archive_bytes(Remote(tmp_path), {0: ["a/x.parquet"]}) is None
