"""The on-disk format's own pieces: the keys and the schema metadata."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.segments import (
    archive_dead_letters_key,
    archive_events_key,
    archive_range_key,
    checkpoint_key,
    parse_task_checkpoint_key,
    parse_task_label,
    realtime_key,
    segment_meta,
    segment_schema,
    task_label,
    written_for,
)


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
