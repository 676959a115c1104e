"""`sluice tables` and `sluice query` on the tables, on both catalogs: an older store migrates
with one command (its corrections keep their versions), the query reads the table and an
earlier snapshot (--as-of), history lists the snapshots, maintenance keeps time travel within
the retention and removes what is older."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import yaml

from orchestration.cli import main
from pipelines.config import PROJECT_ROOT, get_settings
from pipelines.generator import GeneratorOptions
from pipelines.segments import HOUR_MS, hour_label
from pipelines.serving import query_view
from pipelines.serving.older_layout import published_key
from pipelines.tables import TablesConfig, ViewTables
from pipelines.tables.maintenance import maintain, referenced_files, table_files
from pipelines.testing import run_stream
from pipelines.views import load_views
from tests.fixtures.segments import write_older_version
from tests.fixtures.tables import local_tables

VIEWS_FILE = PROJECT_ROOT / "data" / "views.yaml"


@pytest.fixture
def older_store(tmp_path, monkeypatch, control_url):
    """A store of the older layout: realtime partials and a correction of its first hour."""
    views = [v for v in load_views(VIEWS_FILE) if v.name in ("traffic_by_org", "sessions")]
    run = run_stream(tmp_path / "storage", views, options=GeneratorOptions(max_events=1500))
    view = views[0]
    with local_tables(run.store.root, tmp_path / "unused.db") as none_yet:
        starts = query_view(run.store, view, 0, 2**62, prefer="realtime", tables=none_yet).column(
            "window_start"
        )
    hour = int(min(starts.to_pylist()).timestamp() * 1000) // HOUR_MS * HOUR_MS
    fixed = pa.table({"window_start": pa.array([hour], pa.int64()), "org": ["x"], "events": [3]})
    write_older_version(run.store, view, hour, fixed, 3, [hour_label(hour)])
    write_older_version(run.store, view, hour, fixed, 3, [hour_label(hour)])  # v2
    monkeypatch.setenv("SLUICE_STORAGE_ROOT", run.store.root)
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLUICE_CONTROL_STORE_URL", control_url)
    views_file = tmp_path / "views.yaml"
    document = yaml.safe_load(VIEWS_FILE.read_text())
    document["views"] = [
        v for v in document["views"] if v["name"] in ("traffic_by_org", "sessions")
    ]
    views_file.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("SLUICE_VIEWS_FILE", str(views_file))
    get_settings.cache_clear()
    yield run, view, hour
    get_settings.cache_clear()


def _query(capsys, *extra: str) -> list[dict]:
    capsys.readouterr()
    code = main(
        ["query", "traffic_by_org", "--start", "0", "--end", str(2**50), "--format", "json", *extra]
    )
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_migrate_query_as_of_history_and_maintenance(older_store, capsys, control_url) -> None:
    run, view, hour = older_store
    assert main(["tables", "migrate", "--remove-old"]) == 0
    out = capsys.readouterr().out
    assert "sluice.traffic_by_org: 1 corrected segment(s)" in out and "realtime hour(s)" in out
    assert not run.store.exists(published_key(view.name, hour))
    rows = _query(capsys)
    corrected = [r for r in rows if r["window_start"].startswith(hour_label(hour))]
    assert [(r["org"], r["events"], r["source"]) for r in corrected] == [("x", 3, "batch v2")]
    realtime = [r for r in rows if r["source"] == "realtime"]
    tables = ViewTables(TablesConfig.from_settings(get_settings(), run.store.root))
    expected = query_view(
        run.store, view, hour + HOUR_MS, 2**62, prefer="realtime", tables=tables
    ).num_rows
    assert len(realtime) == expected > 0

    table = tables.find(view.name)
    batch_snapshot = next(s for s in table.snapshots() if s.summary["sluice.source"] == "batch")
    before = _query(capsys, "--as-of", str(batch_snapshot.parent_snapshot_id or 0))
    assert before == [] or all(r["source"] == "realtime" for r in before)
    at_batch = _query(capsys, "--as-of", str(batch_snapshot.snapshot_id))
    assert {r["source"] for r in at_batch} == {"batch v2"}
    as_of_time = _query(capsys, "--as-of", "2000-01-01T00:00")
    assert as_of_time == []

    assert main(["tables", "history", "traffic_by_org", "--json"]) == 0
    history = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {
        "snapshot": str(batch_snapshot.snapshot_id),
        "source": "batch",
        "version": "2",
    }.items() <= next(h for h in history if h["source"] == "batch").items()
    assert next(h for h in history if h["source"] == "batch")["run"] == "migration"
    assert main(["tables", "list"]) == 0
    assert "sluice.sessions" in capsys.readouterr().out

    # maintenance: snapshots within the retention stay readable, older ones go with their files
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    cutoff = snapshots[-1].timestamp_ms  # everything before the newest is "old"
    report = maintain(tables, view, retention_ms=1, now_ms=cutoff + 1, grace_ms=0)
    assert report.snapshots_expired == len(snapshots) - 1 and report.files_removed > 0
    table = tables.find(view.name)
    assert [s.snapshot_id for s in table.snapshots()] == [snapshots[-1].snapshot_id]
    left = {path for path, _, _ in table_files(table)}
    assert not any(s.manifest_list in left for s in snapshots[:-1])  # gone with their snapshot
    assert left <= referenced_files(table)  # nothing unreferenced remains
    assert _query(capsys) == rows  # the newest state is intact
    capsys.readouterr()
    assert (
        main(
            [
                "query",
                "traffic_by_org",
                "--start",
                "0",
                "--end",
                "9",
                "--as-of",
                str(batch_snapshot.snapshot_id),
            ]
        )
        == 1
    )
    assert "has no snapshot" in capsys.readouterr().err
    tables.close()


def test_publish_commits_what_the_tasks_flushed(tmp_path, monkeypatch, control_url, capsys):
    """`sluice tables publish` (a `sluice worker` fleet's publisher): the views' tables, read by
    DuckDB through pyiceberg, then hold what the stream's partial states say, row for row."""
    from tests.fixtures.tables import query_realtime

    views = [v for v in load_views(VIEWS_FILE) if v.name in ("traffic_by_org", "sessions")]
    run = run_stream(tmp_path / "storage", views, options=GeneratorOptions(max_events=1500))
    monkeypatch.setenv("SLUICE_STORAGE_ROOT", run.store.root)
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLUICE_CONTROL_STORE_URL", control_url)
    views_file = tmp_path / "views.yaml"
    document = yaml.safe_load(VIEWS_FILE.read_text())
    document["views"] = [v for v in document["views"] if v["name"] in {v.name for v in views}]
    views_file.write_text(yaml.safe_dump(document))
    get_settings.cache_clear()
    try:
        assert main(["tables", "publish", "--views", str(views_file)]) == 0
        out = capsys.readouterr().out
        assert "traffic_by_org: " in out and "sessions: " in out, out
        tables = ViewTables(TablesConfig.from_settings(get_settings(), run.store.root))
        for view in views:
            served = tables.find(view.name).scan().to_duckdb("t").sql("SELECT * FROM t")
            keys = view.key_columns
            got = sorted(
                tuple(str(r[k]) for k in keys) for r in served.to_arrow_table().to_pylist()
            )
            want = query_realtime(run.store, view)
            assert got and got == sorted(tuple(str(r[k]) for k in keys) for r in want.to_pylist())
        tables.close()
    finally:
        get_settings.cache_clear()
