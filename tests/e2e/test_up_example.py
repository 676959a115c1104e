"""`sluice up --views data/flights.yaml --replay data/flights.jsonl.gz`: the shipped example of
a topic of one's own runs the whole main job (stream, corrections, checks, report, Dagster),
the terminal tells each Dagster run as it lands, and the corrected view agrees with counts
computed from the file with plain Python.

Needs the archive and the correction to hold a declared topic (nullable columns, no id,
columns of its own) and the stream to count nulls as the declaration says (issue 46)."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestration.control_plane.runtime import Runtime
from pipelines.config import KafkaSettings, SluiceSettings
from tests.fixtures.processes import MARK, PROJECT, marked, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

VIEWS = PROJECT / "data" / "flights.yaml"
EVENTS = PROJECT / "data" / "flights.jsonl.gz"
HOUR_FORMAT = "%Y-%m-%d-%H:%M"
CORRECTION = re.compile(
    r"correction\s+(?:hour (\S+)|\d+ hours (\S+) to (\S+)), \d+ views: (\S+)", re.S
)


def _messages() -> list[dict]:
    with gzip.open(EVENTS, "rt") as handle:
        return [json.loads(line) for line in handle]


def _utc_hour(message: dict) -> datetime:
    at = datetime.fromisoformat(message["departure"]["scheduled"]).astimezone(UTC)
    return at.replace(minute=0, second=0, microsecond=0)


def _as_utc(value) -> datetime:
    """A table's window start (a timestamp, or epoch ms) as a UTC datetime."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(value / 1000, UTC)


def _corrected_hours(text: str) -> set[str]:
    """Every hour a `correction` line of the terminal says it corrected successfully."""
    hours: set[str] = set()
    for one, first, last, outcome in CORRECTION.findall(re.sub(r"\s*\n\s*", " ", text)):
        if outcome != "done":
            continue
        if one:
            hours.add(one)
            continue
        at, end = datetime.strptime(first, HOUR_FORMAT), datetime.strptime(last, HOUR_FORMAT)
        while at <= end:
            hours.add(at.strftime(HOUR_FORMAT))
            at += timedelta(hours=1)
    return hours


def test_up_runs_the_flights_example_through_dagster(tmp_path: Path) -> None:
    messages = _messages()
    event_hours = {_utc_hour(m).strftime(HOUR_FORMAT) for m in messages}
    mark = uuid.uuid4().hex
    env = {
        **os.environ,
        MARK: mark,
        "PYTHONPATH": str(PROJECT),
        "SLUICE_STATE_DIR": str(tmp_path / "state"),
        "SLUICE_PARTITIONS": "2",
        "COLUMNS": "200",
    }
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # up starts its own embedded broker
    log = tmp_path / "up.log"
    args = ["up", "--views", str(VIEWS), "--replay", str(EVENTS), "--speedup", "7200"]
    args += ["--agents", "1", "--no-autoscale"]
    with log.open("w") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", *args],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def everything_landed() -> bool:
            text = log.read_text(errors="replace")
            assert up.poll() is None, text[-3000:]
            return event_hours <= _corrected_hours(text) and "report  " in text

        wait_until(everything_landed, 780, "every hour corrected and a report, on the terminal")
        text = log.read_text(errors="replace")
        assert "replaying" in text and "to flights at 7200x" in text
        assert "Traceback" not in text
        assert "realtime_within_tolerance on" not in text  # the blocking check never failed
        assert re.search(r"checks\s+\d+ passed", text)
        report = re.search(r"report\s+(\S+\.html)", text)
        assert report and Path(report.group(1)).is_file()

        # the oracle: flights and cancellations per airport and hour, counted from the file
        flights = Counter((_utc_hour(m), m["route"]["origin"]) for m in messages)
        cancelled = Counter(
            (_utc_hour(m), m["route"]["origin"])
            for m in messages
            if m["departure"]["delay_min"] is None
        )
        first, last = min(flights)[0], max(flights)[0] + timedelta(hours=1)
        query = ["query", "delays_by_origin_hourly", "--views", str(VIEWS), "--format", "json"]
        query += ["--start", first.strftime("%Y-%m-%dT%H:%M"), "--end"]
        query += [last.strftime("%Y-%m-%dT%H:%M"), "--prefer", "batch"]
        done = subprocess.run(
            [sys.executable, "-m", "orchestration.cli", *query],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        got = {
            (datetime.fromisoformat(r["window_start"].replace("Z", "+00:00")), r["origin"]): (
                r["flights"],
                r["cancelled"],
            )
            for r in rows
        }
        assert got == {key: (n, cancelled[key]) for key, n in flights.items()}

        # the served table, read by DuckDB through pyiceberg (not Sluice's reader): the same
        # counts, and the mean delay (a double, null where every flight was cancelled) within
        # the reconciliation's tolerance
        delays: dict[tuple, list[float]] = {}
        for m in messages:
            delay = m["departure"]["delay_min"]
            delays.setdefault((_utc_hour(m), m["route"]["origin"]), [])
            if delay is not None:
                delays[_utc_hour(m), m["route"]["origin"]].append(delay)
        settings = SluiceSettings(state_dir=tmp_path / "state")
        table = Runtime(settings, KafkaSettings()).tables.find("delays_by_origin_hourly")
        assert table is not None
        con = table.scan().to_duckdb("served")
        served = con.sql(
            "SELECT window_start, origin, flights, cancelled, dep_delay_mean FROM served"
        ).fetchall()
        assert {(_as_utc(w), o): (n, c) for w, o, n, c, _ in served} == {
            key: (n, cancelled[key]) for key, n in flights.items()
        }
        for w, origin, _, _, mean in served:
            values = delays[_as_utc(w), origin]
            if not values:
                assert mean is None, (w, origin)
            else:
                assert math.isclose(mean, sum(values) / len(values), rel_tol=1e-9), (w, origin)
        assert any(mean is None for *_, mean in served)  # the blizzard's cancelled hours
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(timeout=40)
        for pid in marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(timeout=5)
