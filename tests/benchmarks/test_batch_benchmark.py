"""benchmarks/batch.py runs, on a tiny input, and its two engines agree on every view kind.

A benchmark that no test runs can break unnoticed (a session view in the example file once
made its DuckDB side compute ``event_time % 0``): this runs its comparison as the shipped
command does, over the shipped views, on 3,000 events.
"""

from __future__ import annotations

import pytest

from benchmarks import batch
from pipelines.config import PROJECT_ROOT
from pipelines.views import load_views

pytestmark = pytest.mark.spark


def test_batch_benchmark_agrees_on_every_shipped_view(spark, tmp_path, capsys):
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    assert {v.kind for v in views} == {"window", "session"}  # every kind is covered

    (result,) = batch.compare(spark, tmp_path, [3000], 2, 1, views, first_run=False)

    out = capsys.readouterr().out
    assert result.agree, out
    assert "results agree: yes" in out
    assert "Spark / DuckDB:" in out and "x CPU" in out
    # every view published something: 4 windowed views x 2 hours plus the sessions' hours
    assert result.published >= 2 * len(views)


def test_duckdb_sessions_cut_by_gap_and_max_duration():
    """The DuckDB session query is an oracle of its own: check it on a hand-made key."""
    import duckdb
    import pyarrow as pa

    (view,) = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if v.is_session]
    minute = 60_000
    # gap 5m, max 1h: 0,1,2 | (pause 10m) 12 .. then every 4 minutes up to 80: cut at 72
    times = [0, 1, 2, *range(12, 81, 4)]
    n = len(times)
    con = duckdb.connect()
    con.register(
        "src",
        pa.table(
            {
                "topic": ["events"] * n,
                "event_id": [f"e{i:03d}" for i in range(n)],
                "event_time": [t * minute for t in times],
                "org": ["o"] * n,
                "client": ["c"] * n,
                "bytes_tx": [1] * n,
                "session_id": ["s"] * n,
                "event_type": ["click"] * n,
            }
        ),
    )
    con.execute("CREATE TEMP TABLE ev AS SELECT * FROM src")
    table = batch.duckdb_sessions(con, view)
    starts = [t // minute for t in table.column("session_start").to_pylist()]
    counts = table.column("event_count").to_pylist()
    assert starts == [0, 12, 72]
    assert counts == [3, 15, 3]
