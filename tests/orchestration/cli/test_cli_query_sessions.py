"""`sluice query` on a session view: sessions that started, or were active, in a range."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from orchestration.cli import main, query
from pipelines.config import get_settings
from pipelines.serving import query_sessions
from pipelines.tables import TablesConfig, ViewTables
from pipelines.testing import run_stream
from pipelines.views import load_views

VIEW = {
    "name": "visits",
    "kind": "session",
    "topic": "events",
    "session_key": "client",
    "gap": "5m",
    "max_duration": "30m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "events"}],
}


def _query(capsys, views_file, *args):
    """The CLI's ``query`` command, in process (its parser, its output)."""
    parser = argparse.ArgumentParser()
    query.register(parser.add_subparsers())
    parsed = parser.parse_args(
        ["query", "visits", "--views", str(views_file), "--format", "json", *args]
    )
    capsys.readouterr()
    assert parsed.func(parsed) == 0
    return json.loads(capsys.readouterr().out)


def test_started_and_active_sessions(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    views_file = tmp_path / "views.yaml"
    views_file.write_text(yaml.safe_dump({"views": [VIEW]}))
    (view,) = load_views(views_file)
    run = run_stream(tmp_path / "state" / "storage", [view], max_events=1500, partitions=2)
    with ViewTables(TablesConfig.from_settings(get_settings(), run.store.root)) as tables:
        everything = query_sessions(
            run.store, view, 0, 2**62, "realtime", tables=tables
        ).to_pylist()
    assert len(everything) > 20
    # A range that starts inside many sessions: "active" also returns those started before it.
    longest = max(everything, key=lambda r: r["session_end"] - r["session_start"])
    start_ms = int(longest["session_start"].timestamp() * 1000) + 1
    end_ms = start_ms + 10 * 60_000
    span = ("--start", str(start_ms), "--end", str(end_ms))
    started = _query(capsys, views_file, *span, "--prefer", "realtime")  # the partial states
    active = _query(capsys, views_file, *span, "--active", "--prefer", "realtime")

    def ms(text):
        from datetime import datetime

        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)

    want_started = [
        r for r in everything if start_ms <= int(r["session_start"].timestamp() * 1000) < end_ms
    ]
    want_active = [
        r
        for r in everything
        if int(r["session_start"].timestamp() * 1000) < end_ms
        and int(r["session_end"].timestamp() * 1000) >= start_ms
    ]
    assert len(want_active) > len(want_started) > 0
    assert [(r["client"], ms(r["session_start"])) for r in started] == [
        (r["client"], int(r["session_start"].timestamp() * 1000)) for r in want_started
    ]
    assert {(r["client"], ms(r["session_start"])) for r in active} == {
        (r["client"], int(r["session_start"].timestamp() * 1000)) for r in want_active
    }
    assert all(r["source"] == "realtime" for r in active)
    # published into the view's table, the query of the table says the same
    assert main(["tables", "migrate", "--views", str(views_file)]) == 0
    assert _query(capsys, views_file, *span) == started
    assert _query(capsys, views_file, *span, "--active") == active
    get_settings.cache_clear()


def test_active_is_refused_for_a_windowed_view(tmp_path, monkeypatch, capsys):
    from pipelines.exceptions import QueryError

    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    parser = argparse.ArgumentParser()
    query.register(parser.add_subparsers())
    args = parser.parse_args(["query", "traffic_by_org", "--start", "0", "--end", "1", "--active"])
    try:
        with pytest.raises(QueryError, match="--active is for session views"):
            args.func(args)
    finally:
        get_settings.cache_clear()
