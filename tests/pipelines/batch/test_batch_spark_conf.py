"""Spark settings -> configuration, without starting Spark."""

from __future__ import annotations

import sys

import pytest

from pipelines.batch import SparkSettings, spark_conf, spark_uri
from pipelines.storage import LocalObjectStore, ObjectStore


def test_local_defaults_follow_facts_md():
    conf = spark_conf(SparkSettings())
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.pyspark.python"] == sys.executable
    # Small local archive files pack into one task per core instead of one per 4 MB.
    assert int(conf["spark.sql.files.openCostInBytes"]) < 4 * 1024 * 1024


def test_cluster_masters_keep_sparks_own_choices():
    conf = spark_conf(SparkSettings(master="yarn"))
    assert conf["spark.master"] == "yarn"
    assert "spark.driver.host" not in conf
    assert "spark.sql.shuffle.partitions" not in conf
    assert "spark.sql.files.openCostInBytes" not in conf  # opening an S3 object is not cheap


def test_under_spark_submit_only_explicit_settings_override(monkeypatch):
    monkeypatch.delenv("SLUICE_SPARK_MASTER", raising=False)
    conf = spark_conf(SparkSettings(), under_submit=True)
    for key in ("spark.master", "spark.driver.host", "spark.driver.memory", "spark.app.name"):
        assert key not in conf
    # Never conflicts with a cluster's setup, and a warm session then stops recompiling.
    assert int(conf["spark.sql.codegen.cache.maxEntries"]) >= 1000
    explicit = spark_conf(SparkSettings(shuffle_partitions=64, app_name="x"), under_submit=True)
    assert explicit["spark.sql.shuffle.partitions"] == "64"
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
