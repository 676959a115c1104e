"""`sluice batch correct --hour ISO [--to ISO] [--views a,b]`: exact views from the archive.

Recomputes every segment covering the hours with Spark and publishes it as a new batch
version, which queries then serve instead of the realtime values. Spark is configured by
``SLUICE_SPARK_*`` variables (see docs/batch.md); storage and views by the usual settings.
"""

from __future__ import annotations

import argparse
import uuid

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestration.cli.query import parse_instant
from orchestration.control_plane.runtime import Runtime
from pipelines.batch.config import SparkSettings
from pipelines.batch.exceptions import ArchiveMissing, InvalidHour, UnknownView
from pipelines.exceptions import QueryError
from pipelines.segments import HOUR_MS, hour_label
from pipelines.views import View

__all__ = ["parse_hour", "register"]


def parse_hour(text: str, flag: str) -> int:
    """``2015-02-26T21`` (or any ISO 8601 time on the hour, UTC unless it says otherwise,
    or epoch ms) -> the hour start in epoch ms."""
    try:
        ms = parse_instant(text, flag)
    except QueryError as exc:
        raise InvalidHour(f"{exc} (an hour such as 2015-02-26T21)") from None
    if ms % HOUR_MS:
        raise InvalidHour(f"{flag} {text!r} is not the start of an hour")
    return ms


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("batch", help="Spark batch jobs over the raw archive")
    commands = parser.add_subparsers(dest="batch_command", metavar="COMMAND", required=True)
    correct = commands.add_parser(
        "correct",
        help="recompute views exactly from the archive and publish them as a new version",
        description="Correct every segment covering [--hour, --to) of the given views.",
    )
    correct.add_argument("--hour", required=True, help="first hour, e.g. 2015-02-26T21 (UTC)")
    correct.add_argument("--to", default=None, help="end hour, exclusive (default: --hour + 1h)")
    correct.add_argument("--views", default=None, help="comma-separated view names (default: all)")
    correct.add_argument(
        "--views-file", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    correct.set_defaults(func=run_correct)


def select_views(views: list[View], names: str | None) -> list[View]:
    if not names:
        return views
    known = {v.name: v for v in views}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise UnknownView(
            f"unknown view(s) {', '.join(unknown) or repr(names)} "
            f"(views: {', '.join(sorted(known))})"
        )
    return [known[n] for n in dict.fromkeys(wanted)]


def run_correct(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    from pipelines.batch import archive_hours, build_spark, correct_hours
    from quality.schemas import validate_batch_rows

    runtime = Runtime.from_env()
    views = select_views(
        [r.view for r in runtime.resolved_views(args.views_file).values()], args.views
    )
    start = parse_hour(args.hour, "--hour")
    end = parse_hour(args.to, "--to") if args.to else start + HOUR_MS
    if end <= start:
        raise InvalidHour(f"--to {args.to} is not after --hour {args.hour}")
    hours = list(range(start, end, HOUR_MS))
    archived = archive_hours(runtime.store)
    if not set(hours) & set(archived):
        held = f"{hour_label(archived[0])} .. {hour_label(archived[-1])}" if archived else "nothing"
        raise ArchiveMissing(
            f"no archived events for {hour_label(start)} .. {hour_label(end - HOUR_MS)} "
            f"under {runtime.store.root} (the archive holds {held})"
        )
    settings = SparkSettings()
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # logs and pipes: do not cut view names at 80 columns
    owns_session = SparkSession.getActiveSession() is None
    spark = build_spark(settings, runtime.settings.s3_endpoint_url)
    segments = sum(len({v.segment_start(h) for h in hours}) for v in views)
    try:
        with Progress(
            TextColumn("[bold]correcting"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("reading the archive", total=segments)
            results = correct_hours(
                spark,
                runtime.store,
                views,
                hours,
                s3_scheme=settings.s3_scheme,
                on_result=lambda r: progress.update(
                    task, advance=1, description=f"{r.view} {r.segment}"
                ),
                validate_rows=validate_batch_rows,
                tables=runtime.tables,
                run_id=f"cli-{uuid.uuid4().hex[:12]}",
            )
    finally:
        if owns_session:
            spark.stop()
    console.print(results_table(results))
    published = sum(not r.skipped for r in results)
    console.print(f"{published} segment(s) published, {len(results) - published} skipped")
    return 0 if published else 1


def results_table(results) -> Table:
    table = Table(title="batch correction")
    for name in ("view", "segment", "version", "rows", "events", "duplicates", "seconds"):
        text = name in ("view", "segment")
        table.add_column(name, justify="left" if text else "right", no_wrap=True)
    table.add_column("note", overflow="fold")
    for r in results:
        note = (
            r.reason
            if r.skipped
            else (f"no archive: {', '.join(r.hours_missing)}" if r.hours_missing else "")
        )
        table.add_row(
            r.view,
            r.segment,
            "-" if r.skipped else f"v{r.version}",
            f"{r.rows:,}",
            f"{r.events:,}",
            f"{r.duplicates_dropped:,}",
            f"{r.seconds:.2f}",
            f"[yellow]{note}[/]" if note else "",
        )
    return table
