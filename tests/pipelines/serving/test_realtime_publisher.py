"""The realtime publisher on both catalogs: it commits the hours whose partial states changed,
what it commits equals the merged partials (read back through DuckDB), and a correction that
lands between its check and its commit wins."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest

import pipelines.tables.commit as commit_module
from pipelines.batch.publish import TableTarget, publish_version
from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import HOUR_MS
from pipelines.serving import query_view
from pipelines.serving.publisher import RealtimePublisher
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.tables import BATCH, REALTIME, TablesConfig, ViewTables
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


@pytest.fixture(scope="module")
def records():
    options = GeneratorOptions(max_events=6_000, peak_rate=20_000, speedup=60, warmup_events=500)
    messages = synthesize(load_trace("nyc_taxi"), options)
    return [Rec(i, 1_000 + i, m.value) for i, m in enumerate(messages)]


@pytest.fixture(scope="module")
def views():
    return load_views(PROJECT_ROOT / "data" / "views.yaml")


def _duckdb_rows(tables: ViewTables, view) -> list[dict]:
    """The table's rows as DuckDB reads them through pyiceberg (not Sluice's reader)."""
    con = tables.find(view.name).scan().to_duckdb("t")
    return con.sql("SELECT * EXCLUDE (source, batch_version) FROM t").to_arrow_table().to_pylist()


def _key(view, row) -> tuple:
    start = row[view.key_columns[-1] if view.is_session else "window_start"]
    return (str(start), *(str(row[c]) for c in view.key_columns if c not in ("window_start",)))


def test_publish_changed_hours_and_never_a_corrected_one(
    control_url, tmp_path, views, records, monkeypatch
) -> None:
    root = tmp_path / "root"
    store = LocalObjectStore(root)
    tables = ViewTables(TablesConfig(warehouse=store.root, catalog_url=control_url))
    task = StreamTask(
        "events", 0, views, store, CollectingDeadLetters(), SluiceSettings(state_dir=tmp_path)
    )
    task.start_at(0)
    half = len(records) // 2
    task.process(records[:half])
    task.flush()
    publisher = RealtimePublisher(store, tables, views, interval_s=30)
    first = publisher.publish_once()
    assert set(first.committed) == {v.name for v in views}
    assert not publisher.due() and publisher.publish_once().committed == {}  # nothing changed

    task.process(records[half:])
    task.flush()
    second = publisher.publish_once()
    assert second.committed, "the hours the second half changed are committed again"
    for view in views:  # the table (read by DuckDB) equals the merged partials
        expected = query_view(store, view, 0, 2**62, prefer="realtime", tables=tables).to_pylist()
        got = _duckdb_rows(tables, view)
        assert len(got) == len(expected), view.name
        by_key = {_key(view, r): r for r in got}
        for row in expected:
            mine = by_key[_key(view, row)]
            for column in view.metric_columns:
                assert mine[column] == pytest.approx(row[column]), (view.name, column)

    # a correction lands between the publisher's check of an hour and its commit
    view = next(v for v in views if v.name == "traffic_by_org")
    hour = min(s for name, _, s in publisher.digests if name == view.name)
    fixed = pa.table(
        {"window_start": pa.array([hour], pa.int64()), "org": ["fixed"], "events": [7]}
    )
    original = commit_module.batch_hours
    landed = []

    def check_then_correct(table, v, wanted=None):
        found = original(table, v, wanted)
        if v.name == view.name and not landed:
            landed.append(True)
            with ViewTables(tables.config) as other:
                publish_version(TableTarget(other, run_id="race"), view, hour, fixed, 1, 0, [])
        return found

    monkeypatch.setattr(commit_module, "batch_hours", check_then_correct)
    task.flush()
    publisher.digests.clear()  # every hour looks changed: all are committed again
    publisher.scanned.clear()
    third = publisher.publish_once()
    assert landed and hour in third.skipped[view.name] and hour not in third.committed[view.name]
    served = query_view(store, view, hour, hour + HOUR_MS, tables=tables).to_pylist()
    assert [(r["org"], r["events"], r["source"]) for r in served] == [("fixed", 7, "batch v1")]
    later = [
        r
        for r in _duckdb_rows(tables, view)
        if r["window_start"].timestamp() * 1000 >= hour + HOUR_MS
    ]
    assert later, "the other hours were published"
    sources = {s.summary["sluice.source"] for s in tables.find(view.name).snapshots()}
    assert sources == {REALTIME, BATCH}
    tables.close()
