"""`sluice query VIEW --start ISO --end ISO`: final values per window and group, or the
sessions of a session view that started (``--active``: were active) in the range."""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import UTC, datetime

import orjson
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from orchestration.control_plane.runtime import Runtime
from pipelines.exceptions import QueryError
from pipelines.serving import query_view
from pipelines.tables import AsOf
from pipelines.views import parse_duration

__all__ = ["parse_as_of", "parse_instant", "register"]


def parse_instant(text: str, flag: str) -> int:
    """ISO 8601 (UTC unless it says otherwise) or epoch milliseconds -> epoch milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"{flag} {text!r} is not an ISO 8601 time such as 2015-02-27T10:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("query", help="final values of a view per window and group")
    parser.add_argument("view")
    parser.add_argument("--start", required=True, help="ISO 8601 time (UTC) or epoch ms")
    parser.add_argument("--end", required=True, help="ISO 8601 time (UTC) or epoch ms, exclusive")
    parser.add_argument("--format", choices=["table", "json", "csv"], default="table")
    parser.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    parser.add_argument("--limit", type=int, default=None, help="at most this many rows (table)")
    parser.add_argument(
        "--active",
        action="store_true",
        help="session views: sessions active in the range (started before its end, last event "
        "at or after its start) instead of those that started in it",
    )
    parser.add_argument(
        "--granularity",
        default=None,
        help="merge windows into coarser ones through their states, e.g. 1d (a multiple of "
        "the view's interval that divides a day)",
    )
    parser.add_argument(
        "--as-of",
        default=None,
        help="read the view's table as it was: a time (ISO 8601, UTC) or a snapshot id "
        "(`sluice tables history VIEW` lists them)",
    )
    parser.add_argument(
        "--prefer",
        choices=["newest", "batch", "realtime"],
        default="newest",
        help="newest: the view's table (corrected hours, published realtime ones); batch: "
        "corrected rows only; realtime: merge the stream's partial states now (not yet published)",
    )
    parser.set_defaults(func=run)


def parse_as_of(text: str | None) -> AsOf | None:
    """A snapshot id (more digits than epoch ms have) or a time."""
    if text is None:
        return None
    if text.lstrip("-").isdigit() and len(text.lstrip("-")) > 13:
        return AsOf(snapshot_id=int(text))
    return AsOf(time_ms=parse_instant(text, "--as-of"))


def _plain(value):
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    view = runtime.view(args.view, args.views)
    start = parse_instant(args.start, "--start")
    end = parse_instant(args.end, "--end")
    as_of = parse_as_of(getattr(args, "as_of", None))
    prefer = getattr(args, "prefer", "newest")
    granularity = None
    if args.granularity:
        granularity = parse_duration(args.granularity, "--granularity")
    table = query_view(
        runtime.store,
        view,
        start,
        end,
        prefer,
        tables=runtime.tables,
        as_of=as_of,
        active=args.active,
        granularity_ms=granularity,
    )
    if table.num_rows == 0 and prefer == "newest" and as_of is None:
        print(
            f"no rows in {view.name}'s table for the range: realtime hours appear once the "
            "fleet's publisher commits them (every SLUICE_PUBLISH_INTERVAL_S while agents run); "
            "--prefer realtime merges the stream's partial states now",
            file=sys.stderr,
        )
    write_result(table, args.format, args.limit)
    return 0


def write_result(table: pa.Table, fmt: str, limit: int | None = None) -> None:
    rows = [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]
    if fmt == "json":
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=table.column_names)
        writer.writeheader()
        writer.writerows(rows)
        return
    out = Table(show_lines=False)
    for name in table.column_names:
        out.add_column(name, overflow="fold")
    shown = rows if limit is None else rows[:limit]
    for row in shown:
        out.add_row(
            *(
                "" if v is None else f"{v:,.2f}" if isinstance(v, float) else str(v)
                for v in row.values()
            )
        )
    console = Console()
    console.print(out)
    if len(shown) < len(rows):
        console.print(f"({len(rows) - len(shown)} more rows; use --format csv or json for all)")
