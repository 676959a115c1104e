"""One closed hour corrected by Dagster: launch to success, through the warm Spark Connect server
and through spark-submit, in the same session (called by ``benchmarks/batch.py``).

    .venv/bin/python benchmarks/batch_launch.py [--events 12000] [--repeat 2] [--timeline]
        [--no-submit] [--hours 1]

Streams ``--events`` messages of the main job's trace (``nyc_taxi``, as ``sluice up`` replays it:
about 8,800 events an hour) through real stream tasks into a temporary state directory,
starts the warm server (``sluice spark start``, the default Spark settings) and Dagster
(``start_dagster``), then launches the ``correct_views`` job for the first hour with GraphQL and
times it from the launch to the run's success (as seen by polling), ``--repeat`` times with the
server running and ``--repeat`` times after ``sluice spark stop`` (every run then starts
``spark-submit``). Everything it started is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assets.partitions import partition_key_for
from orchestration.control_plane.dagster_service import DagsterHandle, start_dagster
from orchestration.control_plane.spark.server import SparkConnectServer
from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions
from pipelines.testing import run_stream
from pipelines.views import load_views

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}
"""
LOGS = """
query Logs($id: ID!, $cursor: String) {
  logsForRun(runId: $id, afterCursor: $cursor, limit: 1000) {
    ... on EventConnection {
      cursor hasMore
      events { __typename ... on MessageEvent { timestamp message stepKey } }
    }
  }
}
"""
STATUS = """
query Status($id: ID!) {
  runOrError(runId: $id) {
    ... on Run { status startTime endTime stepStats { stepKey startTime endTime } }
  }
}
"""


def _sluice_spark(state: Path, *args: str) -> dict:
    env = {**os.environ, "SLUICE_STATE_DIR": str(state)}
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "spark", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout)


def timeline(handle: DagsterHandle, run_id: str, launched_at: float) -> list[str]:
    """The run's event log as lines: seconds since the launch, the gap since the event before,
    the event's type and step, and the start of its message (where the run's time goes)."""
    events: list[dict] = []
    cursor = None
    while True:
        page = handle.graphql(LOGS, {"id": run_id, "cursor": cursor})["logsForRun"]
        events += page["events"]
        cursor = page["cursor"]
        if not page["hasMore"]:
            break
    lines, before = [], launched_at
    for event in events:
        at = int(event["timestamp"]) / 1000
        message = (event.get("message") or "").splitlines()
        lines.append(
            f"    {at - launched_at:7.2f} (+{at - before:6.2f}) {event['__typename']:<34} "
            f"{event.get('stepKey') or '':<16} {(message[0] if message else '')[:70]}"
        )
        before = at
    return lines


def correct_one_hour(
    handle: DagsterHandle,
    partition: str,
    timeout_s: float = 900,
    show_timeline: bool = False,
    last: str | None = None,
) -> tuple[float, float]:
    """Seconds from ``launchRun`` of ``correct_views`` for ``partition`` (to ``last``: one
    run for the range, as a backfill launches it) to its SUCCESS, and of its
    ``corrected_views`` step alone (the launch and the Spark job, without the checks and the
    run worker's start)."""
    tags = [{"key": "dagster/partition", "value": partition}]
    if last is not None:
        tags = [
            {"key": "dagster/asset_partition_range_start", "value": partition},
            {"key": "dagster/asset_partition_range_end", "value": last},
        ]
    params = {
        "selector": {
            "repositoryLocationName": "sluice",
            "repositoryName": "__repository__",
            "jobName": "correct_views",
        },
        "executionMetadata": {"tags": tags},
    }
    started, launched_at = time.perf_counter(), time.time()
    launched = handle.graphql(LAUNCH, {"params": params})["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"launch failed: {launched}")
    run_id = launched["run"]["runId"]
    while time.perf_counter() - started < timeout_s:
        run = handle.graphql(STATUS, {"id": run_id})["runOrError"]
        status = run["status"]
        if status == "SUCCESS":
            took = time.perf_counter() - started
            step = next(s for s in run["stepStats"] if s["stepKey"] == "corrected_views")
            if show_timeline:
                print("\n".join(timeline(handle, run_id, launched_at)))
            return took, step["endTime"] - step["startTime"]
        if status in ("FAILURE", "CANCELED"):
            raise RuntimeError(f"run {run_id} ended {status}")
        time.sleep(0.2)
    raise TimeoutError(f"run {run_id} not done after {timeout_s:.0f} s")


def measure(
    workdir: Path,
    events: int,
    repeat: int,
    timelines: bool = False,
    submit: bool = True,
    hours: int = 1,
) -> dict[str, list[tuple[float, float]]]:
    """Launch-to-success seconds of one hour's correction (``hours``: the first so many
    streamed, in one run), warm server then spark-submit."""
    state = workdir / "state"
    settings = SluiceSettings(state_dir=state)
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    options = GeneratorOptions(max_events=events, peak_rate=3000.0, speedup=480.0)
    stream = run_stream(settings.resolved_storage_root, views, trace="nyc_taxi", options=options)
    frame = stream.events_frame(dedupe=True)
    per_hour = (frame["event_time"] - frame["event_time"] % 3_600_000).value_counts()
    hour, n = int(per_hour.idxmax()), int(per_hour.max())  # the fullest hour streamed
    last = None
    if hours > 1:  # the first hours streamed, but not the last one (it may still be open)
        streamed = sorted(int(h) for h in per_hour.index)[:-1][:hours]
        hour, n = streamed[0], int(per_hour[per_hour.index.isin(streamed)].sum())
        last = partition_key_for(streamed[-1])
    partition = partition_key_for(hour)
    what = f"{partition} .. {last}" if last else partition
    print(f"\nclosed hours through Dagster, one run: {what}, {n:,} events in them")
    server = SparkConnectServer(state)
    times: dict[str, list[tuple[float, float]]] = {
        "warm Spark Connect server": [],
        "spark-submit": [],
    }
    if not submit:
        del times["spark-submit"]
    handle = None
    try:
        _sluice_spark(state, "start")
        # Partitions end a day after the stream, as `sluice up` ends them after its replay: open
        # to the present, a 2014 trace has 109,000 hourly partitions, and in a range run Dagster
        # lists them all for every check's result (about 2 s per check step here).
        last_hour = int(per_hour.index.max())
        end = partition_key_for(last_hour + 86_400_000)
        env = {"SLUICE_ENV": "local", "SLUICE_PARTITIONS_END": end}
        handle = start_dagster(settings, extra_env=env, timeout_s=300)
        for label in times:
            if label == "spark-submit":
                _sluice_spark(state, "stop")
            for _ in range(repeat):
                seconds, step = correct_one_hour(
                    handle, partition, show_timeline=timelines, last=last
                )
                times[label].append((seconds, step))
                print(
                    f"  {label}: {seconds:.1f} s from launch to success, of which the "
                    f"corrected_views step {step:.1f} s; load average {os.getloadavg()[0]:.1f}"
                )
            if label != "spark-submit":
                health = server.health()
                print(f"  (server after the runs: {health.line()})")
    finally:
        if handle is not None:
            handle.stop()
        server.stop()
    for label, runs in times.items():
        print(
            f"  {label}: best {min(r[0] for r in runs):.1f} s launch -> success (runs "
            f"{', '.join(f'{r[0]:.1f}' for r in runs)}), correction step best "
            f"{min(r[1] for r in runs):.1f} s (correct_views: raw_archive, every view, checks)"
        )
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=12000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--no-submit", action="store_true", help="only the warm server, not spark-submit"
    )
    parser.add_argument(
        "--timeline", action="store_true", help="print each run's event log, timed from launch"
    )
    parser.add_argument(
        "--hours",
        type=int,
        default=1,
        help="correct the first N closed hours streamed in one run (a backfill's range run)",
    )
    args = parser.parse_args(argv)
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}"
    )
    # SIGTERM (a timeout) unwinds like Ctrl-C, so Dagster and the server are stopped by PID
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="sluice-launch-"))
    try:
        measure(workdir, args.events, args.repeat, args.timeline, not args.no_submit, args.hours)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
