"""`sluice tables`: the views' Iceberg tables: list them, a view's snapshot history, publish
the realtime hours (for `sluice worker` fleets, which have no leader to), migrate an older
store into them, and run their maintenance now (docs/serving.md)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from orchestration.control_plane.runtime import Runtime
from pipelines.segments import HOUR_MS
from pipelines.serving.migrate import migrate_store
from pipelines.serving.publisher import PublishPass, RealtimePublisher
from pipelines.tables.maintenance import files_per_hour, maintain

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tables", help="the views' Iceberg tables (docs/serving.md)")
    sub = parser.add_subparsers(dest="tables_command", required=True)
    listing = sub.add_parser("list", help="every view's table: location, snapshot, rows, files")
    listing.add_argument("--views", default=None, help="view definitions")
    listing.set_defaults(func=run_list)
    history = sub.add_parser("history", help="a view's snapshots (for `sluice query --as-of`)")
    history.add_argument("view")
    history.add_argument("--limit", type=int, default=20, help="newest N snapshots")
    history.add_argument("--views", default=None, help="view definitions")
    history.add_argument("--json", action="store_true", help="one JSON object per snapshot")
    history.set_defaults(func=run_history)
    publish = sub.add_parser(
        "publish",
        help="commit the realtime hours the tasks flushed to the views' tables (an agent fleet's "
        "leader does this itself; run it beside `sluice worker` processes)",
    )
    publish.add_argument("--views", default=None, help="view definitions")
    publish.add_argument(
        "--follow",
        action="store_true",
        help="pass every SLUICE_PUBLISH_INTERVAL_S until SIGTERM or SIGINT, then a last pass",
    )
    publish.set_defaults(func=run_publish)
    migrate = sub.add_parser(
        "migrate",
        help="commit an older store's corrections (_published.json, batch/v<N>/) and realtime "
        "hours to the views' tables",
    )
    migrate.add_argument("--views", default=None, help="view definitions")
    migrate.add_argument(
        "--remove-old",
        action="store_true",
        help="then delete the _published.json manifests and batch/v<N>/ directories",
    )
    migrate.set_defaults(func=run_migrate)
    maintenance = sub.add_parser(
        "maintain", help="expire old snapshots and remove orphan files now (as the job does)"
    )
    maintenance.add_argument("--views", default=None, help="view definitions")
    maintenance.set_defaults(func=run_maintain)


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_list(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    tables = runtime.tables
    out = Table(
        title=f"tables in {tables.config.kind} catalog, namespace {tables.config.namespace}"
    )
    for name in (
        "table",
        "snapshot",
        "committed",
        "rows",
        "data files",
        "max files/hour",
        "location",
    ):
        out.add_column(name, overflow="fold")
    for view in runtime.active_views(args.views):
        table = tables.find(view.name)
        if table is None:
            out.add_row(tables.name(view.name), "-", "-", "-", "-", "-", "(not created yet)")
            continue
        snapshot = table.current_snapshot()
        per_hour = files_per_hour(table, view)
        rows = snapshot.summary.get("total-records", "0") if snapshot and snapshot.summary else "0"
        out.add_row(
            tables.name(view.name),
            str(snapshot.snapshot_id) if snapshot else "-",
            _time(snapshot.timestamp_ms) if snapshot else "-",
            rows,
            str(sum(per_hour.values())),
            str(max(per_hour.values(), default=0)),
            table.location(),
        )
    Console(width=max(Console().width, 160)).print(out)  # names and paths whole, to copy
    return 0


def run_history(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    view = runtime.view(args.view, args.views)
    table = runtime.tables.find(view.name)
    console = Console()
    if table is None:
        console.print(f"{view.name} has no table yet (nothing published or corrected)")
        return 1
    rows = []
    for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)[-args.limit :]:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        rows.append(
            {
                "snapshot": str(snapshot.snapshot_id),
                "committed": _time(snapshot.timestamp_ms),
                "source": summary.get("sluice.source", "-"),
                "version": summary.get("sluice.batch-version", "-"),
                "hours": summary.get("sluice.hours", "-"),
                "run": summary.get("sluice.run-id", ""),
                "rows": summary.get("total-records", "-"),
            }
        )
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    out = Table(title=f"{runtime.tables.name(view.name)}: newest {args.limit} snapshots")
    for name in rows[0] if rows else ():
        out.add_column(name, overflow="fold")
    for row in rows:
        out.add_row(*row.values())
    console.print(out)
    return 0


def run_publish(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    views = runtime.active_views(args.views)
    publisher = RealtimePublisher.from_settings(
        runtime.store, runtime.tables, views, runtime.settings
    )
    console = Console()
    stop = threading.Event()
    if args.follow:
        for signum in (signal.SIGTERM, signal.SIGINT):  # the pass under way ends first
            signal.signal(signum, lambda *_: stop.set())
        while not stop.is_set():
            _print_pass(console, publisher.publish_once(), quiet=True)
            stop.wait(max(0.0, publisher.next_pass - time.monotonic()))
    result = publisher.publish_once()  # once, or the last pass: the workers' final flushes
    _print_pass(console, result, quiet=False)
    return 0


def _print_pass(console: Console, result: PublishPass, quiet: bool) -> None:
    """One line per pass that committed or left a view for later (``quiet``: nothing for a
    pass that found nothing to do)."""
    parts = [f"{view}: {len(hours)} hour(s)" for view, hours in result.committed.items()]
    parts += [f"{view}: left for the next pass" for view in result.deferred]
    if not parts and quiet:
        return
    console.print(
        f"published {', '.join(parts) or 'nothing (no hour changed)'} in {result.seconds:.2f} s "
        f"({result.cpu_seconds:.2f} s CPU)",
        highlight=False,
        soft_wrap=True,  # one line per pass, as a log reads
    )


def run_migrate(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    views = runtime.active_views(args.views)
    started = time.monotonic()
    result = migrate_store(runtime.store, runtime.tables, views, remove_old=args.remove_old)
    console = Console()
    for view in views:
        console.print(
            f"{runtime.tables.name(view.name)}: {result.batch_segments.get(view.name, 0)} "
            f"corrected segment(s), {result.realtime_hours.get(view.name, 0)} realtime hour(s)"
        )
    if args.remove_old:
        console.print(f"removed {result.removed} file(s) of the older layout")
    console.print(f"migrated in {time.monotonic() - started:.1f} s")
    return 0


def run_maintain(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    settings = runtime.settings
    console = Console()
    for view in runtime.active_views(args.views):
        if runtime.tables.find(view.name) is None:
            continue
        report = maintain(
            runtime.tables,
            view,
            int(settings.tables_snapshot_retention_h * HOUR_MS),
            int(settings.tables_realtime_snapshot_retention_m * 60_000),
        )
        console.print(
            f"{view.name}: {report.snapshots_expired} snapshot(s) expired, "
            f"{report.snapshots_kept} kept; {report.files_removed} orphan file(s) removed "
            f"({report.bytes_removed / 1e6:.1f} MB); {report.data_files} data file(s), at most "
            f"{report.max_files_per_hour} per hour"
        )
    return 0
