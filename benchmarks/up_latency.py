"""How long after `sluice up`'s replay ends its day is reported, from the Dagster run history.

    bash scripts/run.sh up                     # let the replay end and the report appear
    .venv/bin/python benchmarks/up_latency.py [--state-dir .sluice] [--wait 900]

The replay's end is when the generator wrote its report (``<state_dir>/generate-report.json``);
the day's report is the first ``reconciliation_report`` of ``--day`` (nyc_taxi's 2014-07-01)
materialized after it. In between,
it lists every run of the Dagster instance of ``<state_dir>/dagster`` (created, started, ended,
what it materialized), so the wait for the hours to close, the correction runs and the
report's run each show. ``--wait`` polls until the replay ends and the report appears (while `up` runs).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _at(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S") if ts else "-"


def report_after(instance, since: float, day: str) -> float | None:
    """Timestamp of the first reconciliation_report of ``day`` materialized after ``since``."""
    import dagster as dg

    records = instance.fetch_materializations(dg.AssetKey("reconciliation_report"), limit=100)
    times = [
        r.timestamp for r in records.records if r.timestamp >= since and r.partition_key == day
    ]
    return min(times) if times else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default=".sluice")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the report")
    parser.add_argument(
        "--day", default="2014-07-01", help="the replayed day (up's default: nyc_taxi's)"
    )
    args = parser.parse_args(argv)
    state = Path(args.state_dir).resolve()
    os.environ["DAGSTER_HOME"] = str(state / "dagster")
    import dagster as dg

    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}"
    )
    replay = state / "generate-report.json"
    deadline = time.monotonic() + args.wait
    while not replay.exists() and time.monotonic() < deadline:
        time.sleep(2)
    if not replay.exists():
        print(f"no replay has ended in {state} (no {replay.name})", file=sys.stderr)
        return 2
    ended = replay.stat().st_mtime
    instance = dg.DagsterInstance.get()
    reported = report_after(instance, ended, args.day)
    while reported is None and time.monotonic() < deadline:
        time.sleep(5)
        reported = report_after(instance, ended, args.day)
    print(f"replay ended {_at(ended)} UTC")
    runs = sorted(instance.get_run_records(), key=lambda r: r.create_timestamp.timestamp())
    for record in runs:
        run = record.dagster_run
        created = record.create_timestamp.timestamp()
        if created < ended - 3600:
            continue
        assets = sorted(k.path[-1] for k in run.asset_selection or [])
        what = f"{len(assets)} assets ({', '.join(assets[:2])}{', ...' if len(assets) > 2 else ''})"
        took = (record.end_time or 0) - (record.start_time or 0)
        print(
            f"  run {run.run_id[:8]} {run.status.value:8s} created {_at(created)} started "
            f"{_at(record.start_time)} ended {_at(record.end_time)} ({took:.0f} s): "
            f"{what} {run.tags.get('dagster/partition', '')}"
        )
    if reported is None:
        print("the day's report has not appeared yet")
        return 1
    print(
        f"{args.day}'s report {_at(reported)} UTC: {reported - ended:.0f} s after the replay's end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
