"""Serving benchmark: the views as Iceberg tables (issue 29, docs/serving.md).

Prints, with the machine:

  (a) freshness: an event fed to a stream task (in this process, at a steady rate, as a live
      stream would arrive) -> counted by a DuckDB query of ``traffic_by_org``'s table through
      pyiceberg; p50/p95 over the run, with the flush (``--flush-interval``) and publish
      (``--publish-interval``) intervals, the settings' defaults unless given; the publisher
      commits what the change log names; its commit time per pass and its CPU (thread time)
      as a share of one core;
  (b) a query of one view-day: DuckDB over the table (pyiceberg scan -> DuckDB) against the
      same day through `sluice query`'s code over today's layout (merging every task's partial
      states) and through the tables (``query_view`` on the tables);
  (c) a day of 30 s publishes of one view (``--publishes``, 2,880 = 24 h), the publisher's
      snapshot expiry every 20 commits: data files per hour, manifests, snapshots and files
      under the table, commit time at the start and the end, then the maintenance's effect.

    .venv/bin/python benchmarks/serving.py                      # full size (about 25 min)
    .venv/bin/python benchmarks/serving.py --seconds 40 --flush-interval 5 --publish-interval 5 \\
        --day-events 20000 --publishes 200                      # a quick look
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from pipelines.config import PROJECT_ROOT, SluiceSettings  # noqa: E402
from pipelines.generator import GeneratorOptions, load_trace, synthesize  # noqa: E402
from pipelines.segments import HOUR_MS  # noqa: E402
from pipelines.serving import query_view  # noqa: E402
from pipelines.serving.publisher import RealtimePublisher  # noqa: E402
from pipelines.storage import LocalObjectStore  # noqa: E402
from pipelines.stream.task import StreamTask  # noqa: E402
from pipelines.tables import (  # noqa: E402
    REALTIME,
    TablesConfig,
    ViewTables,
    replace_hours,
    table_rows,
)
from pipelines.tables.maintenance import (  # noqa: E402
    expire_snapshots,
    files_per_hour,
    maintain,
    table_files,
)
from pipelines.testing import CollectingDeadLetters, run_stream  # noqa: E402
from pipelines.views import load_views  # noqa: E402

VIEWS = PROJECT_ROOT / "data" / "views.yaml"


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def tables_in(tmp: Path) -> ViewTables:
    return ViewTables(
        TablesConfig(warehouse=str(tmp / "root"), catalog_url=f"sqlite:///{tmp / 'catalog.db'}")
    )


def freshness(args: argparse.Namespace, tmp: Path) -> dict:
    views = load_views(VIEWS)
    traffic = next(v for v in views if v.name == "traffic_by_org")
    store = LocalObjectStore(tmp / "root")
    tables = tables_in(tmp)
    options = GeneratorOptions(
        max_events=int(args.rate * args.seconds),
        late_share=0.0,
        duplicate_share=0.0,
        malformed_share=0.0,
        warmup_events=0,
    )
    messages = [m for m in synthesize(load_trace("nyc_taxi"), options)]
    records = [Rec(i, 1000 + i, m.value) for i, m in enumerate(messages)]
    task = StreamTask(
        "events", 0, views, store, CollectingDeadLetters(), SluiceSettings(state_dir=tmp)
    )
    task.start_at(0)
    publisher = RealtimePublisher(store, tables, views, args.publish_interval)
    fed_at: list[float] = []
    seen: list[tuple[float, int]] = []
    passes = []
    stop = threading.Event()

    def publish_loop() -> None:
        while not stop.is_set():
            if publisher.due():
                passes.append(publisher.publish_once())
            stop.wait(0.2)

    def probe_loop() -> None:
        probe_tables = tables_in(tmp)
        while not stop.is_set():
            table = probe_tables.find(traffic.name)
            if table is not None and table.current_snapshot() is not None:
                con = table.scan(selected_fields=("events",)).to_duckdb("t")
                count = con.sql("SELECT coalesce(sum(events), 0) FROM t").fetchall()[0][0]
                seen.append((time.monotonic(), int(count)))
            stop.wait(0.5)
        probe_tables.close()

    threads = [threading.Thread(target=publish_loop), threading.Thread(target=probe_loop)]
    for t in threads:
        t.start()
    started = time.monotonic()
    next_flush = started + args.flush_interval
    position = 0
    try:
        while position < len(records):
            now = time.monotonic()
            due = min(len(records), int((now - started) * args.rate))
            if due > position:
                task.process(records[position:due])
                fed_at.extend([now] * (due - position))
                position = due
            if now >= next_flush:
                task.flush()
                next_flush = now + args.flush_interval
            time.sleep(0.05)
        deadline = time.monotonic() + args.flush_interval + 3 * args.publish_interval + 30
        while time.monotonic() < deadline and not (seen and seen[-1][1] >= len(fed_at)):
            if time.monotonic() >= next_flush:
                task.flush()
                next_flush = time.monotonic() + args.flush_interval
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join()
    elapsed = time.monotonic() - started
    delays = []
    j = 0
    for i, t_fed in enumerate(fed_at):
        while j < len(seen) and (seen[j][1] < i + 1 or seen[j][0] < t_fed):
            j += 1
        if j == len(seen):
            break
        delays.append(seen[j][0] - t_fed)
    commits = [p.seconds for p in passes if p.committed]
    cpu = sum(p.cpu_seconds for p in passes)
    tables.close()
    return {
        "events": len(fed_at),
        "visible": len(delays),
        "p50": pct(delays, 0.5),
        "p95": pct(delays, 0.95),
        "passes": len(passes),
        "commit_p50": pct(commits, 0.5),
        "commit_p95": pct(commits, 0.95),
        "cpu_share": cpu / elapsed,
    }


def query_day(args: argparse.Namespace, tmp: Path) -> dict:
    views = load_views(VIEWS)
    run = run_stream(
        tmp / "root",
        views,
        options=GeneratorOptions(max_events=args.day_events, speedup=360.0),
        trace="nyc_taxi",
    )
    tables = tables_in(tmp)
    started = time.monotonic()
    publish = RealtimePublisher(run.store, tables, views).publish_once()
    publish_s = time.monotonic() - started
    view = next(v for v in views if v.name == args.view)
    hours = run.event_hours()
    day = max(
        {h - h % (24 * HOUR_MS) for h in hours},
        key=lambda d: sum(d <= h < d + 24 * HOUR_MS for h in hours),
    )
    start, end = day, day + 24 * HOUR_MS
    timings: dict[str, list[float]] = {
        "old layout (sluice query)": [],
        "duckdb on the table": [],
        "sluice query on the table": [],
    }
    rows = {}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        rows["old"] = query_view(
            run.store, view, start, end, prefer="realtime", tables=tables
        ).num_rows
        timings["old layout (sluice query)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        table = tables.find(view.name)
        con = table.scan(
            row_filter=f"window_start >= '{_iso(start)}' AND window_start < '{_iso(end)}'"
        ).to_duckdb("t")
        rows["duckdb"] = con.sql("SELECT * FROM t").to_arrow_table().num_rows
        timings["duckdb on the table"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rows["table"] = query_view(run.store, view, start, end, tables=tables).num_rows
        timings["sluice query on the table"].append(time.perf_counter() - t0)
        tables.close()
        tables = tables_in(tmp)
    files = len(run.store.list(f"segments/{view.name}/"))
    tables.close()
    return {
        "events": args.day_events,
        "view": view.name,
        "rows": rows,
        "realtime_files": files,
        "publish_all_s": publish_s,
        "published_hours": sum(len(h) for h in publish.committed.values()),
        "best": {k: min(v) for k, v in timings.items()},
    }


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def day_of_publishes(args: argparse.Namespace, tmp: Path) -> dict:
    view = next(v for v in load_views(VIEWS) if v.name == args.view)
    tables = tables_in(tmp)
    refused = _Counter()
    logging.getLogger("pipelines.tables.commit").addHandler(refused)
    first_hour = 1_404_172_800_000
    commits = args.publishes
    per_hour = 120  # 30 s publishes
    times: list[float] = []
    stamps: list[int] = []
    for i in range(commits):
        hour = first_hour + (i // per_hour) * HOUR_MS
        hours = [hour] if i % per_hour > 4 or i < per_hour else [hour - HOUR_MS, hour]
        n = 6 * 40  # 10-minute windows x 40 orgs
        rows = pa.table(
            {
                "window_start": pa.array(
                    [h + (k % 6) * 600_000 for h in hours for k in range(n)], pa.int64()
                ),
                "org": [f"org-{k // 6:03d}" for _ in hours for k in range(n)],
                "events": pa.array([i] * (n * len(hours)), pa.int64()),
            }
        )
        t0 = time.perf_counter()
        replace_hours(tables, view, hours, table_rows(view, rows, REALTIME, 0), source=REALTIME)
        times.append(time.perf_counter() - t0)
        stamps.append(int(time.time() * 1000))
        if i % 20 == 19 and i >= per_hour:  # the publisher's expiry, every 10 minutes
            keep_since = stamps[i - per_hour]  # one hour of publishes back
            now = int(time.time() * 1000)
            expire_snapshots(
                tables, view, now, retention_ms=72 * HOUR_MS, realtime_retention_ms=now - keep_since
            )
    table = tables.find(view.name)
    before = len(table_files(table))
    manifests = len(table.current_snapshot().manifests(table.io))
    snapshots = len(table.snapshots())
    counts = files_per_hour(table, view)
    report = maintain(tables, view, retention_ms=72 * HOUR_MS, realtime_retention_ms=0, grace_ms=0)
    after = len(table_files(tables.find(view.name)))
    tables.close()
    return {
        "publishes": commits,
        "hours": len(counts),
        "max_data_files_per_hour": max(counts.values()),
        "manifests": manifests,
        "snapshots": snapshots,
        "files_before_maintenance": before,
        "files_after_maintenance": after,
        "snapshots_after_maintenance": report.snapshots_kept,
        "commit_first_100_p50": pct(times[:100], 0.5),
        "commit_last_100_p50": pct(times[-100:], 0.5),
        "commit_p95": pct(times, 0.95),
        "by_filter": refused.count,
    }


class _Counter(logging.Handler):
    """Counts the commits pyiceberg's overwrite refused (then made by the hours' filter)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "overwrite refused" in record.getMessage()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="(a) how long events arrive")
    parser.add_argument("--rate", type=float, default=200.0, help="(a) events per second")
    parser.add_argument("--flush-interval", type=float, default=SluiceSettings().flush_interval_s)
    parser.add_argument(
        "--publish-interval", type=float, default=SluiceSettings().publish_interval_s
    )
    parser.add_argument("--day-events", type=int, default=211_178, help="(b) events of the day")
    parser.add_argument("--repeat", type=int, default=3, help="(b) runs per reader, best kept")
    parser.add_argument("--publishes", type=int, default=2880, help="(c) 30 s publishes")
    parser.add_argument("--view", default="traffic_by_org")
    parser.add_argument("--only", choices=["freshness", "query", "day"], default=None)
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at the start"
    )
    with tempfile.TemporaryDirectory(prefix="sluice-serving-") as tmp:
        base = Path(tmp)
        if args.only in (None, "freshness"):
            (base / "a").mkdir()
            f = freshness(args, base / "a")
            print(
                f"(a) freshness over {f['events']} events ({f['visible']} seen), flush every "
                f"{args.flush_interval:g} s, publish every {args.publish_interval:g} s: "
                f"p50 {f['p50']:.1f} s, p95 {f['p95']:.1f} s; {f['passes']} publisher passes, "
                f"commit pass p50 {f['commit_p50']:.2f} s, p95 {f['commit_p95']:.2f} s, "
                f"publisher CPU {100 * f['cpu_share']:.1f}% of one core"
            )
        if args.only in (None, "query"):
            (base / "b").mkdir()
            q = query_day(args, base / "b")
            best = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in q["best"].items())
            print(
                f"(b) one day of {q['view']} ({q['events']} events, {q['rows']['duckdb']} rows, "
                f"{q['realtime_files']} realtime files; first publish of {q['published_hours']} "
                f"hours took {q['publish_all_s']:.1f} s): {best}; rows {q['rows']}"
            )
        if args.only in (None, "day"):
            (base / "c").mkdir()
            d = day_of_publishes(args, base / "c")
            print(
                f"(c) {d['publishes']} publishes ({d['hours']} hours): at most "
                f"{d['max_data_files_per_hour']} data file per hour, {d['manifests']} manifests, "
                f"{d['snapshots']} snapshots, {d['files_before_maintenance']} files under the table "
                f"-> {d['files_after_maintenance']} after maintenance "
                f"({d['snapshots_after_maintenance']} snapshots); commit p50 "
                f"{d['commit_first_100_p50'] * 1000:.0f} ms (first 100) -> "
                f"{d['commit_last_100_p50'] * 1000:.0f} ms (last 100), p95 {d['commit_p95'] * 1000:.0f} ms; "
                f"{d['by_filter']} commit(s) refused by pyiceberg's overwrite, made by filter"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
