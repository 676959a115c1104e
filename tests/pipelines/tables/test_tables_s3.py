"""The tables with the warehouse on S3 (moto's server): a publish, a correction, time travel,
DuckDB's read and the orphan clean-up all go through s3:// paths."""

from __future__ import annotations

import uuid

import boto3
import pyarrow as pa
import pytest

from pipelines.batch.publish import TableTarget, publish_version
from pipelines.config import PROJECT_ROOT
from pipelines.segments import HOUR_MS
from pipelines.tables import REALTIME, TablesConfig, ViewTables, replace_hours, table_rows
from pipelines.tables.maintenance import maintain, referenced_files, table_files
from pipelines.views import load_views
from tests.fixtures.moto import aws_test_credentials

H = 1_404_201_600_000


def test_tables_on_s3(moto_endpoint, monkeypatch, tmp_path) -> None:
    aws_test_credentials(monkeypatch)
    bucket = f"sluice-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    root = f"s3://{bucket}/prefix"
    view = next(
        v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if v.name == "traffic_by_org"
    )
    tables = ViewTables(
        TablesConfig(
            warehouse=root,
            catalog_url=f"sqlite:///{tmp_path / 'catalog.db'}",
            s3_endpoint_url=moto_endpoint,
            properties={"s3.region": "us-east-1"},
        )
    )
    rows = pa.table(
        {
            "window_start": pa.array([H, H + 600_000, H + HOUR_MS], pa.int64()),
            "org": ["a", "b", "a"],
            "events": [1, 2, 3],
        }
    )
    first = replace_hours(
        tables, view, [H, H + HOUR_MS], table_rows(view, rows, REALTIME, 0), source=REALTIME
    )
    version, files = publish_version(
        TableTarget(tables, run_id="s3"), view, H, rows.slice(0, 1), 1, 0, []
    )
    assert version == 1 and files[0].startswith(f"s3://{bucket}/prefix/tables/traffic_by_org/data/")
    table = tables.find(view.name)
    got = (
        table.scan()
        .to_duckdb("t")
        .sql("SELECT org, events, source FROM t ORDER BY window_start")
        .fetchall()
    )
    assert got == [("a", 1, "batch"), ("a", 3, "realtime")]
    before = table.scan(snapshot_id=first.snapshot_id).to_arrow()
    assert sorted(before.column("events").to_pylist()) == [1, 2, 3]
    report = maintain(
        tables, view, retention_ms=1, now_ms=table.current_snapshot().timestamp_ms + 1, grace_ms=0
    )
    assert report.snapshots_expired == 1 and report.files_removed >= 2
    table = tables.find(view.name)
    assert {p for p, _, _ in table_files(table)} <= referenced_files(table)
    with pytest.raises(ValueError):  # the expired snapshot is gone
        table.scan(snapshot_id=first.snapshot_id).to_arrow()
    tables.close()
