"""One trace loader, in UTC: the machine's time zone never shifts a trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipelines.generator import TraceFormatError, load_trace

ROOT = Path(__file__).resolve().parents[2]


def _dst_trace(path: Path) -> Path:
    """Five-minute points around the US change of 2026-03-08 02:00 local (07:00 UTC), naive."""
    start = datetime(2026, 3, 8, 0, 0)
    rows = ["timestamp,value"]
    for i in range(12 * 6):  # 00:00 .. 05:55 naive
        rows.append(f"{(start + timedelta(minutes=5 * i)).isoformat(sep=' ')},{i % 7 + 1}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _rates_in(tz: str, trace: Path) -> dict:
    script = (
        "import json, sys, numpy as np\n"
        "from pipelines.generator import load_trace\n"
        "from orchestration.control_plane.autoscaling.simulator import Simulator\n"
        "from orchestration.control_plane.autoscaling.config import AutoscaleSettings\n"
        "t = load_trace(sys.argv[1])\n"
        "s = AutoscaleSettings().updated(simulation={'peak_rate': 700.0, 'step_s': 300.0})\n"
        "sim = Simulator(t, s)\n"
        "print(json.dumps({'start': t.start_s, 'times': t.times_s.tolist(),\n"
        "                  'rates': np.round(sim.rate, 9).tolist()}))\n"
    )
    env = {**os.environ, "TZ": tz}
    out = subprocess.run(
        [sys.executable, "-c", script, str(trace)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def test_a_trace_across_a_dst_change_reads_the_same_in_every_time_zone(tmp_path: Path) -> None:
    trace = _dst_trace(tmp_path / "dst.csv")
    new_york = _rates_in("America/New_York", trace)
    utc = _rates_in("UTC", trace)
    assert new_york == utc
    assert utc["start"] == datetime(2026, 3, 8, tzinfo=UTC).timestamp()
    steps = {b - a for a, b in zip(utc["times"], utc["times"][1:], strict=False)}
    assert steps == {300.0}, "naive local time would make one step 3,900 s (01:55 -> 03:00)"


def test_an_unparseable_timestamp_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,value\n2026-03-08 00:00:00,1\n8 March,2\n")
    with pytest.raises(TraceFormatError, match=r"bad\.csv:3: bad timestamp '8 March'"):
        load_trace(path)
