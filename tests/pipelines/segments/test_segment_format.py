"""The on-disk format's own pieces: the published manifest and the schema metadata."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.segments import (
    ManifestError,
    PublishedManifest,
    archive_dead_letters_key,
    archive_events_key,
    archive_range_key,
    checkpoint_key,
    parse_task_checkpoint_key,
    parse_task_label,
    published_key,
    read_manifest,
    realtime_key,
    segment_meta,
    segment_schema,
    task_label,
    write_manifest,
    written_for,
)
from pipelines.storage import open_store


def test_a_manifest_reads_back_as_written_and_keeps_the_old_json_layout(tmp_path) -> None:
    store = open_store(str(tmp_path))
    assert read_manifest(store, "v", 0) is None
    manifest = PublishedManifest(
        version=2, files=("a.parquet",), events=10, hours=("1970-01-01T00",)
    )
    write_manifest(store, "v", 0, manifest)
    assert read_manifest(store, "v", 0) == manifest
    # what earlier versions wrote (a dict with lists) is read the same way
    store.put(published_key("v", 0), b'{"version": 3, "files": ["b"], "kind": "batch", "x": 1}')
    assert read_manifest(store, "v", 0) == PublishedManifest(version=3, files=("b",))


def test_a_broken_manifest_is_a_clear_error(tmp_path) -> None:
    store = open_store(str(tmp_path))
    store.put(published_key("v", 0), b'{"files": []}')
    with pytest.raises(
        ManifestError,
        match=r"_published.json is not a published manifest: version: Field required$",
    ):
        read_manifest(store, "v", 0)


def test_segment_metadata_has_one_writer_and_one_reader() -> None:
    schema = segment_schema([pa.field("x", pa.int64())], "traffic", "f1", "realtime")
    meta = segment_meta(schema)
    assert (meta.view, meta.fingerprint, meta.kind) == ("traffic", "f1", "realtime")
    assert written_for(schema, "f1") and not written_for(schema, "f2")
    assert segment_meta(pa.schema([pa.field("x", pa.int64())])) is None
    assert not written_for(pa.schema([]), "f1")
    with pytest.raises(ValueError, match="segment kind"):
        segment_schema([], "traffic", "f1", "partial")


@pytest.mark.parametrize(("bucket", "factor", "suffix"), [(0, 1, ""), (5, 8, "-b5of8")])
def test_every_key_of_a_task_names_its_bucket_the_same_way(bucket, factor, suffix) -> None:
    task = (3, bucket, factor)
    assert task_label(*task) == f"3{suffix}"
    assert parse_task_label(task_label(*task)) == task
    assert realtime_key("v", 0, "t", *task).endswith(f"/t-3{suffix}.parquet")
    assert parse_task_checkpoint_key(checkpoint_key("t", 3, 7, bucket, factor)) == ("t", *task, 7)
    assert archive_events_key(0, "t", 3, 10, 20, bucket, factor).endswith(
        f"/t-3-10-20{suffix}.parquet"
    )
    assert archive_dead_letters_key(0, "t", 3, 10, 20, bucket, factor).endswith(
        f"/t-3-10-20{suffix}.parquet"
    )
    assert archive_range_key("t", 3, 10, 20, bucket, factor).endswith(
        f"/{10:020d}-{20:020d}{suffix}.json"
    )
