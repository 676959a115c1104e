"""A split's or merge's rewrite of realtime files is atomic to every reader: a query and a
publisher pass run after each single write or delete of the rewrite (stepped, not slept) see
each row exactly once, equal to the rows before the rewrite (themselves checked against an
oracle computed from the records). The conditional write that makes a rewrite visible refuses
a lower lease term, on local files and on S3 (moto's server)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import boto3
import pytest

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import (
    RealtimeRewrite,
    RewriteFenced,
    RewriteUnsettled,
    fence,
    read_realtime,
    realtime_key,
)
from pipelines.serving import query_view
from pipelines.serving.publisher import RealtimePublisher
from pipelines.storage import LocalObjectStore, ObjectStore, open_store
from pipelines.stream import TaskId
from pipelines.stream.rebucket import merge_tasks, split_task
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters, Record
from pipelines.views import load_views
from tests.fixtures.moto import aws_test_credentials
from tests.fixtures.oracle import Truth, compare_view
from tests.fixtures.tables import local_tables

DEFAULTS = SluiceSettings()
LIMITS = (DEFAULTS.max_message_bytes, int(DEFAULTS.max_future_s * 1000))
NAMES = ("traffic_by_org", "bytes_quantiles_by_type", "transfers_last_hour")
VIEWS = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if v.name in NAMES]
CHECKED = ("traffic_by_org", "transfers_last_hour")
"""The views whose table a publisher pass is checked on at every step (exact metrics)."""


def _records(n: int) -> list[Record]:
    options = GeneratorOptions(
        seed=5, max_events=n, peak_rate=20_000, speedup=60, warmup_events=300, late_share=0.05
    )
    messages = synthesize(load_trace("nyc_taxi"), options)
    return [Record(i, 1_000 + i, m.key, m.value) for i, m in enumerate(messages)]


RECORDS = _records(3_000)


class SteppedStore(ObjectStore):
    """A local store that runs ``at_step`` after each write or delete: the readers, between
    every two writes of a rewrite."""

    def __init__(self, inner: LocalObjectStore, at_step: Callable[[str, str], None]) -> None:
        self.inner = inner
        self.root = inner.root
        self.at_step = at_step
        self.steps: list[tuple[str, str]] = []

    def _step(self, what: str, key: str) -> None:
        self.steps.append((what, key))
        self.at_step(what, key)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        self._step("put", key)

    def put_if(self, key: str, data: bytes, version: str | None) -> bool:
        done = self.inner.put_if(key, data, version)
        self._step("put_if", key)
        return done

    def delete(self, key: str) -> None:
        self.inner.delete(key)
        self._step("delete", key)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        return self.inner.get_versioned(key)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)


def _without_source(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "source"} for r in rows]


def test_a_query_and_a_publisher_pass_between_any_two_writes_of_a_split_or_merge_see_each_row_once(
    tmp_path,
):
    inner = LocalObjectStore(tmp_path / "root")
    settings = SluiceSettings(state_dir=tmp_path / "state")
    whole = TaskId("events", 0)
    task = StreamTask("events", 0, VIEWS, inner, CollectingDeadLetters(), settings)
    task.start_at(0)
    for i in range(0, len(RECORDS), 500):
        task.process(RECORDS[i : i + 500])
    task.checkpoint()

    with local_tables(inner.root, tmp_path / "catalog.db") as tables:
        before = {
            v.name: query_view(inner, v, 0, 2**62, "realtime", tables=tables).to_pylist()
            for v in VIEWS
        }
        truth = Truth(VIEWS)  # the rows before, against the oracle
        truth.add_partition([r.value for r in RECORDS], *LIMITS)
        for view in VIEWS:
            problems = compare_view(view, before[view.name], truth.expected(view))
            assert before[view.name] and not problems, problems[:5]
        publisher = RealtimePublisher(inner, tables, VIEWS, interval_s=0.0, read_wait_s=0.0)
        publisher.publish_once()
        checked = [v for v in VIEWS if v.name in CHECKED]
        seen: list[tuple[str, str]] = []

        def readers(what: str, key: str) -> None:
            """The query of every view and a publisher pass (reading every segment: a fresh
            scan) at this step; each sees the rows before the rewrite, once each."""
            seen.append((what, key))
            for view in VIEWS:
                rows = query_view(inner, view, 0, 2**62, "realtime", tables=tables).to_pylist()
                assert rows == before[view.name], f"{view.name} after {what} {key}"
            publisher.scanned.clear()
            publisher.publish_once()
            for view in checked:
                rows = query_view(inner, view, 0, 2**62, "newest", tables=tables).to_pylist()
                assert _without_source(rows) == _without_source(before[view.name]), (
                    f"{view.name}'s table after {what} {key}"
                )

        store = SteppedStore(inner, readers)
        low, high = split_task(store, VIEWS, "org", whole, term=1)
        split_steps = len(seen)
        moved = [k for w, k in seen if w == "delete" and k.startswith("segments/")]
        assert moved, "the split moved realtime files"
        assert merge_tasks(store, VIEWS, low, high, term=1) == whole
        assert len(seen) > split_steps + 3, seen[split_steps:]
        readers("end", "")
        child = realtime_key(VIEWS[0].name, 0, "events", 0, 0, 2).rpartition("/")[2]
        assert not any(k.endswith(child) for k in inner.list("segments/")), (
            "the merge removed the children's files"
        )


def test_a_reader_applies_a_committed_rewrite_before_it_is_finished(tmp_path):
    """Stopped right after the commit: the old file is still listed and the new one only
    staged; a reader sees the new one only."""
    store = LocalObjectStore(tmp_path)
    old = realtime_key("v", 0, "t", 0)
    new = realtime_key("v", 0, "t", 0, 0, 2)
    store.put(old, b"old")
    rewrite = RealtimeRewrite(store, "v", term=3)
    rewrite.move(0, [old], {new: b"new"})
    from pipelines.segments import rewrites

    finished = rewrites._finish
    rewrites._finish = lambda *_: None  # the writer dies right after its commit
    try:
        rewrite.commit()
    finally:
        rewrites._finish = finished
    assert store.list("segments/") == [old]
    assert read_realtime(store, "v") == {0: [(new, b"new")]}
    fence(store, ["v"], 4)  # the next leader finishes it
    assert store.list("segments/") == [new]
    assert read_realtime(store, "v") == {0: [(new, b"new")]}
    assert store.list("rewrites/v/") == []  # the staged copy is gone


def _fencing(store: ObjectStore) -> None:
    old = realtime_key("v", 0, "t", 0)
    store.put(old, b"old")
    assert store.put_if("x", b"1", None) and not store.put_if("x", b"2", None)
    data, version = store.get_versioned("x")
    assert data == b"1" and not store.put_if("x", b"3", "not-the-version")
    assert store.put_if("x", b"4", version) and store.get("x") == b"4"
    fence(store, ["v"], 5)
    stale = RealtimeRewrite(store, "v", term=4)
    stale.move(0, [old], {realtime_key("v", 0, "t", 0, 1, 2): b"stale"})
    with pytest.raises(RewriteFenced, match="term 4 refused: term 5 wrote"):
        stale.commit()
    assert read_realtime(store, "v") == {0: [(old, b"old")]}
    assert store.list("") == sorted([old, "rewrites/v.json", "x"])  # nothing staged is left
    current = RealtimeRewrite(store, "v", term=5)
    new = realtime_key("v", 0, "t", 0, 0, 2)
    current.move(0, [old], {new: b"new"})
    current.commit()
    assert read_realtime(store, "v") == {0: [(new, b"new")]}


def test_a_lower_term_cannot_commit_a_rewrite_on_local_files(tmp_path):
    _fencing(LocalObjectStore(tmp_path))


def test_a_lower_term_cannot_commit_a_rewrite_on_s3(moto_endpoint, monkeypatch):
    aws_test_credentials(monkeypatch)
    bucket = f"sluice-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    _fencing(open_store(f"s3://{bucket}/prefix", s3_endpoint_url=moto_endpoint))


def test_a_reader_whose_file_is_deleted_under_it_reads_again(tmp_path):
    """A merge runs between the reader's listing and its read of a file it removes: the read
    is done again, not failed, and sees the files after the merge."""
    inner = LocalObjectStore(tmp_path)
    old, other = realtime_key("v", 0, "t", 0, 0, 2), realtime_key("v", 0, "t", 1)
    inner.put(old, b"old")
    inner.put(other, b"other")
    new = realtime_key("v", 0, "t", 0)
    raced: list[str] = []

    class Racing(LocalObjectStore):
        def get(self, key: str) -> bytes:
            if key == old and not raced:
                raced.append(key)
                rewrite = RealtimeRewrite(inner, "v", term=1)
                rewrite.move(0, [old], {new: b"new"})
                rewrite.commit()
            return super().get(key)

    assert read_realtime(Racing(tmp_path), "v") == {0: sorted([(new, b"new"), (other, b"other")])}
    assert raced


class Churning(LocalObjectStore):
    """A store whose rewrite record, once ``churning``, changes at every read of it (a rewrite
    that never settles)."""

    churning = False

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        found = super().get_versioned(key)
        if self.churning and found is not None and key.startswith("rewrites/"):
            self.put(key, found[0] + b" ")
        return found


def test_a_reader_gives_up_on_a_rewrite_that_never_settles_and_the_publisher_skips_the_view(
    tmp_path,
):
    store = Churning(tmp_path / "root")
    fence(store, [v.name for v in VIEWS], 1)
    task = StreamTask(
        "events", 0, VIEWS, store, CollectingDeadLetters(), SluiceSettings(state_dir=tmp_path)
    )
    task.start_at(0)
    task.process(RECORDS[:500])
    task.checkpoint()
    store.churning = True
    with pytest.raises(RewriteUnsettled, match="kept changing under a split or merge"):
        read_realtime(store, VIEWS[0].name, wait_s=0.05)
    with local_tables(store.root, tmp_path / "catalog.db") as tables:
        publisher = RealtimePublisher(store, tables, VIEWS, interval_s=0.0, read_wait_s=0.05)
        result = publisher.publish_once()
        assert sorted(result.deferred) == sorted(v.name for v in VIEWS) and not result.committed
        assert all(tables.find(v.name) is None for v in VIEWS)  # nothing committed
        assert all(store.list(f"changes/{v.name}/") for v in VIEWS)  # kept for the next pass
