"""`sluice views validate FILE | list | schema`: check a views file before anything runs it.

``validate`` prints every mistake of a file at once, each with its path, and exits 2 if there
is one (with ``--deployed``, also a declaration change the archive or the deployed views
cannot follow: :mod:`pipelines.views.evolution`); ``list`` shows the views in force (the file's, or a newer deployment's:
:mod:`pipelines.views.resolve`) with their state and source, then the declaration of each topic
they read (its columns and types, event time and id); ``schema`` prints the JSON Schema
that editors validate ``views.yaml`` with (``data/views.schema.json`` is its output).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from orchestration.control_plane.runtime import Runtime
from pipelines.events.declaration import EVENT_TIME, ColumnType, TopicDeclaration
from pipelines.exceptions import DeclarationChangeRefused, ViewDefinitionError
from pipelines.kinds import by_kind, kind_of
from pipelines.views import (
    ResolvedView,
    View,
    check_views,
    read_views_document,
    views_json_schema,
)
from pipelines.views.evolution import check_against

__all__ = ["declaration_rows", "register", "view_row"]

INVALID = 2
"""The exit code of a views file with mistakes (as for an invalid setting)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "views", help="validate a views file, list the views in force, print the JSON Schema"
    )
    commands = parser.add_subparsers(dest="views_command", metavar="COMMAND", required=True)
    validate = commands.add_parser(
        "validate",
        help="report every mistake of a views file (exit 2 if any)",
        description="Check FILE (its views and its topics:) against its topics' declarations "
        "(SLUICE_TOPICS_FILE for the topics it does not declare) and the aggregator registry; "
        "print each mistake with its path, or a one-line summary.",
    )
    validate.add_argument("file", metavar="FILE", help="a views file, e.g. data/views.yaml")
    validate.add_argument("--json", action="store_true", help="the result as JSON")
    validate.add_argument(
        "--deployed",
        action="store_true",
        help="also refuse a change of its topics' declarations that the archive (the storage "
        "root) or the views deployed in the control store cannot follow, as a deploy would",
    )
    validate.set_defaults(func=run_validate)
    listing = commands.add_parser(
        "list",
        help="the views in force: kind, topic, window, state and source; each topic's columns",
        description="Every view from its newest change, the views file or a deployment "
        "recorded in the control store (SLUICE_CONTROL_STORE_URL), then the declaration of "
        "each topic they read: its columns with their types, its event time and its id.",
    )
    listing.add_argument(
        "--views", default=None, help="view definitions (default: SLUICE_VIEWS_FILE)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per view, in a list")
    listing.set_defaults(func=run_list)
    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of a views file (for editors)",
        description="The JSON Schema (draft 2020-12) of a views file; data/views.schema.json "
        "is this output, referenced by data/views.yaml for editors.",
    )
    schema.set_defaults(func=run_schema)


def run_validate(args: argparse.Namespace) -> int:
    try:
        views, problems = check_views(read_views_document(args.file))
        lines = [p.line(args.file) for p in problems]
    except ViewDefinitionError as exc:  # unreadable, or not YAML
        views, lines = [], [str(exc)]
    if args.deployed and not lines:
        runtime = Runtime.from_env()
        try:
            check_against(views, runtime.deployments(), runtime.store)
        except DeclarationChangeRefused as exc:
            lines = [f"{args.file}: {exc}"]
    if args.json:
        result = {"file": args.file, "valid": not lines, "errors": lines, "views": len(views)}
        print(json.dumps(result, indent=2))
    elif lines:
        print("\n".join(lines))
        print(f"{args.file}: {len(lines)} error{'s' if len(lines) > 1 else ''}", file=sys.stderr)
    else:
        counts = ", ".join(f"{len(of)} {kind.label}" for kind, of in by_kind(views).items())
        print(f"{args.file}: {len(views)} views valid ({counts})")
    return INVALID if lines else 0


def view_row(resolved: ResolvedView) -> dict[str, Any]:
    """What ``list`` shows of a view: its timing is the window, or the session gap and cap."""
    view: View = resolved.view
    return {
        "name": view.name,
        "kind": view.kind,
        "topic": view.topic,
        "window": kind_of(view).timing(view),
        "state": resolved.state,
        "source": resolved.source,
    }


def declaration_rows(declaration: TopicDeclaration) -> list[tuple[str, str, str]]:
    """A topic's columns as ``list`` shows them: name, type, and where the value comes from."""
    time = declaration.event_time
    if time.source == "record":
        origin = "the record's timestamp"
    else:
        pattern = f" {time.pattern!r}" if time.pattern else ""
        origin = f"{time.path or EVENT_TIME} ({time.format}{pattern})"
    rows = [(EVENT_TIME, ColumnType.TIMESTAMP.value, f"event time: {origin}")]
    for column in declaration.fields:
        notes = [f"path {column.path}"] if column.path else []
        notes += ["nullable"] if column.nullable else []
        notes += ["id"] if column.name == declaration.id else []
        rows.append((column.name, column.type.value, ", ".join(notes)))
    for name, kind in declaration.record.columns().items():
        rows.append((name, kind.value, "from the record"))
    for derived in declaration.derived_columns():
        notes = [f"derived: {derived.text}"] + (["nullable"] if derived.nullable else [])
        rows.append((derived.name, derived.type.value, ", ".join(notes)))
    return rows


def _print_topics(console: Console, views: list[View]) -> None:
    declarations = {v.topic: v.declaration for v in views if v.declaration is not None}
    for topic, declaration in declarations.items():
        ident = f"id {declaration.id}" if declaration.id else "no id: every record counts"
        table = Table(
            title=f"Topic {topic} ({declaration.encoding}, {ident})",
            title_justify="left",
            box=box.SIMPLE_HEAD,
        )
        for column in ("column", "type", "notes"):
            table.add_column(column, overflow="fold")
        for row in declaration_rows(declaration):
            table.add_row(*row)
        console.print(table)


def run_list(args: argparse.Namespace) -> int:
    resolved = Runtime.from_env().resolved_views(args.views).values()
    rows = [view_row(r) for r in resolved]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="Views in force", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("name", "kind", "topic", "window", "state", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        cells = [*list(row.values())[:-1], _short(row["source"])]
        table.add_row(*cells, style="dim" if row["state"] == "Disabled" else None)
    # Into a file or a pipe rich would wrap at 80 columns; a view's row stays one line there.
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    _print_topics(console, [r.view for r in resolved])
    return 0


def _short(source: str) -> str:
    """``file /abs/cwd/data/views.yaml`` -> ``file data/views.yaml``: the table stays narrow."""
    prefix = f"file {Path.cwd()}/"
    return "file " + source[len(prefix) :] if source.startswith(prefix) else source


def run_schema(args: argparse.Namespace) -> int:
    print(json.dumps(views_json_schema(), indent=2))
    return 0
