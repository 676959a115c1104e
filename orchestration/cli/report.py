"""`sluice report --date D`: the reconciliation report of an event-time day, as HTML + Markdown.

Writes ``reports/<D>/reconciliation.{html,md,json}`` under the storage root (and a copy to
``--out DIR`` if given), prints where, the headline and any failures. Exit 0 when the report
is written, failures or not (they are the report's content); 2 on bad input. ``--json``
prints the same as one JSON object, for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from orchestration.control_plane.runtime import Runtime
from pipelines.exceptions import ConfigError, ViewDefinitionError
from quality.report import headline, parse_day, publish_report
from quality.report.render import notes

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="reconciliation report of an event-time day (HTML with plots + Markdown)"
    )
    parser.add_argument(
        "--date", required=True, help="event-time UTC day, YYYY-MM-DD (e.g. 2014-07-01)"
    )
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    parser.add_argument("--out", default=None, help="also copy the report files to this directory")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the day's headline, notes, failures and file locations as JSON",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(soft_wrap=True)  # paths stay whole, to copy
    err = Console(stderr=True, soft_wrap=True)
    runtime = Runtime.from_env()
    try:
        day = parse_day(args.date)
        views = runtime.active_views(args.views)
    except (ConfigError, ViewDefinitionError) as exc:
        err.print(f"sluice report: error: {escape(str(exc))}")
        return 2
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        err.print(f"sluice report: error: --out {out} exists and is not a directory")
        return 2
    with err.status(
        f"building the report of {day.isoformat()}: archive, realtime and corrected values "
        f"of {len(views)} views, then plots ..."
    ):
        data, stored = publish_report(
            runtime.store,
            runtime.control,
            views,
            day,
            topic=runtime.settings.topic,
            tables=runtime.tables,
        )
    copied = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for key in stored.keys.values():
            target = out / Path(key).name
            target.write_bytes(runtime.store.get(key))
            copied.append(str(target))
    if args.json:
        summary = {
            "day": day.isoformat(),
            "headline": data.headline(),
            "notes": notes(data),
            "failures": [reason for result in data.failed for reason in result.failures],
            "files": {fmt: runtime.store.uri(key) for fmt, key in stored.keys.items()},
            "copied": copied,
        }
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return 0
    console.print(f"[bold]Reconciliation report {day.isoformat()}[/]: {escape(headline(data))}")
    for note in notes(data):
        console.print(f"  [yellow]{escape(note)}[/]")
    for result in data.failed:
        for reason in result.failures:
            console.print(f"  [red]FAILED[/] {escape(reason)}")
    for fmt, key in stored.keys.items():
        console.print(f"{fmt}: {runtime.store.uri(key)}")
    for target in copied:
        console.print(f"copied to {target}")
    return 0
