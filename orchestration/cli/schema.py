"""`sluice schema infer`: propose a topic's declaration from a sample of its messages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from pipelines.config import KafkaSettings, get_settings
from pipelines.events.infer import infer_declaration
from pipelines.exceptions import SluiceError
from pipelines.kafka import resolve_bootstrap
from pipelines.kafka.sample import sample_topic

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("schema", help="propose a topic's declaration from its messages")
    commands = parser.add_subparsers(dest="schema_command", metavar="COMMAND", required=True)
    infer = commands.add_parser(
        "infer",
        help="read a sample of a topic (or a JSON Lines file) and print a proposed topics: entry",
        description="Read up to --sample messages from the earliest offset (nothing committed) "
        "and print a topics: entry: each leaf of the JSON objects as a column, its type, "
        "nullability, the event time and an id. What the sample leaves open is marked "
        "'# ambiguous: ...' (notes in JSON).",
    )
    source = infer.add_mutually_exclusive_group(required=True)
    source.add_argument("--topic", help="the topic to sample")
    source.add_argument("--file", type=Path, help="a JSON Lines file to infer from instead")
    infer.add_argument("--sample", type=int, default=1000, help="messages to read")
    infer.add_argument("--format", choices=("yaml", "json"), default="yaml")
    infer.add_argument(
        "--name",
        default=None,
        help="the topic named in the proposal (default: --topic, or the file's stem)",
    )
    infer.set_defaults(func=run_infer)


def run_infer(args: argparse.Namespace) -> int:
    if args.sample < 1:
        raise SluiceError("--sample must be at least 1")
    console = Console(stderr=True)
    if args.file is not None:
        if not args.file.is_file():
            raise SluiceError(f"no such file: {args.file}")
        name = args.name or args.file.stem
        messages: list[bytes | None] = []
        with args.file.open("rb") as handle:
            for raw in handle:
                if len(messages) >= args.sample:
                    break
                if raw.strip():
                    messages.append(raw.strip())
    else:
        name = args.name or args.topic
        kafka = KafkaSettings()
        bootstrap = resolve_bootstrap(get_settings(), kafka)
        with Progress(
            TextColumn(f"sampling {args.topic}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("sample", total=None)

            def progress(read: int, expected: int) -> None:
                bar.update(task, completed=read, total=expected)

            messages = list(sample_topic(bootstrap, kafka, args.topic, args.sample, progress))
    if not messages:
        raise SluiceError(f"{args.topic or args.file}: no messages to infer from")
    try:
        inference = infer_declaration((m or b"" for m in messages), name)
    except ValueError as exc:
        raise SluiceError(str(exc)) from exc
    sys.stdout.write(inference.as_yaml() if args.format == "yaml" else inference.as_json() + "\n")
    if inference.not_objects:
        console.print(
            f"{inference.not_objects:,} of {len(messages):,} messages were not JSON objects "
            "(skipped)",
            highlight=False,
        )
    return 0
