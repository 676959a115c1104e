"""`sluice replay FILE --topic T`: produce a file of one's own events to a topic."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from pydantic import ValidationError
from rich.console import Console

from orchestration.control_plane.runtime import Runtime
from pipelines.config import KafkaSettings, get_settings
from pipelines.events.declaration import TimeFormat, TopicDeclaration
from pipelines.exceptions import SluiceError
from pipelines.generator.file_replay import (
    BadRow,
    FileReplayReport,
    TimeField,
    format_of,
    read_rows,
    replay_file,
    time_span,
)
from pipelines.generator.progress import ReplayProgress
from pipelines.kafka import ensure_topics, exact_end_offsets, resolve_bootstrap
from pipelines.kafka.writer import open_writer

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="produce a JSON Lines, CSV or Parquet file of events to a topic",
        description="Each row goes to the topic as a JSON object, paced by its event time at "
        "--speedup (or as fast as the broker takes them). Bad rows are reported with their "
        "line and skipped; Ctrl-C stops after flushing what was sent.",
    )
    parser.add_argument("file", type=Path, help="a .jsonl, .csv or .parquet file")
    parser.add_argument("--topic", required=True, help="the topic to produce to")
    parser.add_argument(
        "--format",
        choices=("jsonl", "csv", "parquet"),
        default=None,
        help="the file's format (default: by its extension)",
    )
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument(
        "--speedup",
        type=float,
        default=None,
        help="event seconds per wall second (needs --time-field)",
    )
    pace.add_argument(
        "--as-fast-as-possible",
        action="store_true",
        help="no pacing (the default without --speedup)",
    )
    parser.add_argument(
        "--time-field",
        default=None,
        help="path of the event time, e.g. ts or meta.created_at (default: the declaration's)",
    )
    parser.add_argument(
        "--time-format",
        choices=[f.value for f in TimeFormat],
        default=None,
        help="default: the declaration's, else numbers by magnitude, strings as ISO-8601",
    )
    parser.add_argument(
        "--time-pattern", default=None, help="strptime pattern (--time-format pattern)"
    )
    parser.add_argument("--key-field", default=None, help="path of the message key")
    parser.add_argument(
        "--views",
        type=Path,
        default=None,
        help="a views or topics file declaring the topic (types CSV cells); "
        "default: SLUICE_TOPICS_FILE or data/topics.yaml",
    )
    parser.add_argument(
        "--progress",
        type=Path,
        default=None,
        help="keep the replay's progress in this JSON file (what `sluice up` shows)",
    )
    parser.add_argument(
        "--open-ended",
        action="store_true",
        help="more input will follow: do not record where this input ends (by default the "
        "archive sensor closes the last hours once the fleet has read through it)",
    )
    parser.set_defaults(func=run)


def declared(path: Path | None, topic: str) -> TopicDeclaration | None:
    """The declaration of ``topic`` by name in ``path`` (a views or topics file), if any.

    Read as the model accepts it, not as the loader does: replay only types a file's cells,
    so what only views care about does not stop it."""
    path = path or get_settings().topics_file
    if not path.is_file():
        return None
    try:
        entries = (yaml.safe_load(path.read_text()) or {}).get("topics") or []
        for entry in entries:
            if isinstance(entry, dict) and entry.get("topic") == topic:
                return TopicDeclaration.model_validate(entry)
    except (yaml.YAMLError, AttributeError) as exc:
        raise SluiceError(f"{path}: not a topics file: {exc}") from exc
    except ValidationError as exc:
        raise SluiceError(f"{path}: topic {topic}: {exc.errors()[0]['msg']}") from exc
    return None


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    if not args.file.is_file():
        raise SluiceError(f"no such file: {args.file}")
    try:
        file_format = format_of(args.file, args.format)
    except ValueError as exc:
        raise SluiceError(str(exc)) from exc
    declaration = declared(args.views, args.topic)
    time_field = None
    path, fmt, pattern, zone = args.time_field, args.time_format, args.time_pattern, "UTC"
    if declaration is not None and declaration.event_time.source == "field":
        et = declaration.event_time
        path = path or et.path or "event_time"
        if args.time_field is None:
            fmt, pattern, zone = fmt or et.format.value, pattern or et.pattern, et.zone
    if path is not None:
        time_field = TimeField(path, TimeFormat(fmt) if fmt else None, pattern, zone)
    if args.speedup is not None:
        if args.speedup <= 0:
            raise SluiceError("--speedup must be above 0")
        if time_field is None:
            raise SluiceError("--speedup paces by event time: give --time-field")
    kafka = KafkaSettings()
    settings = get_settings()
    bootstrap = resolve_bootstrap(settings, kafka)
    ensure_topics(bootstrap, {args.topic: settings.partitions}, kafka)
    control = Runtime.from_env().control
    control.input_ends.clear(args.topic)  # the input is open while the replay goes on
    out = open_writer(bootstrap, kafka)

    def send(key: bytes | None, value: bytes) -> None:
        out.send(args.topic, key, value)

    def on_bad(row: BadRow) -> None:
        console.print(
            f"[yellow]skipped[/] {args.file}:{row.line}: {row.reason}",
            highlight=False,
            soft_wrap=True,
        )

    span_s = _span_s(args, file_format, declaration, time_field)

    def progress(report: FileReplayReport, done: bool = False) -> None:
        if args.progress is not None:
            _progress(report, span_s, args.speedup, done).write(args.progress)
        if done:
            return
        console.print(
            f"[dim]replay[/] {report.produced:>10,} msgs  "
            f"{report.produced / report.wall_s:>8,.0f}/s  {len(report.bad):,} skipped",
            highlight=False,
        )

    try:
        report = replay_file(
            read_rows(args.file, file_format, declaration),
            send,
            key_field=args.key_field,
            time_field=time_field,
            speedup=args.speedup,
            on_bad=on_bad,
            progress=progress,
        )
    except (OSError, EOFError) as exc:  # a truncated or corrupt file (gzip's errors among them)
        raise SluiceError(f"cannot read {args.file}: {exc}") from exc
    finally:
        out.flush()
        out.close()
    if not args.open_ended and not report.stopped:
        # Flushed: the log ends where this file does. The archive sensor closes the last hours
        # once every task has checkpointed through these offsets, as after `sluice generate`.
        control.input_ends.record(args.topic, exact_end_offsets(bootstrap, kafka, args.topic))
    control.close()
    progress(report, done=True)
    console.print(
        f"produced {report.produced:,} messages to {args.topic} in {report.wall_s:.1f}s"
        f"{' (interrupted)' if report.stopped else ''}; {len(report.bad):,} bad rows skipped",
        highlight=False,
    )
    return 130 if report.stopped else 0


def _span_s(
    args: argparse.Namespace,
    file_format: str,
    declaration: TopicDeclaration | None,
    time_field: TimeField | None,
) -> float | None:
    """Event seconds the file covers, read before the replay when its progress is kept."""
    if args.progress is None or time_field is None:
        return None
    try:
        span = time_span(read_rows(args.file, file_format, declaration), time_field)
    except (OSError, EOFError) as exc:
        raise SluiceError(f"cannot read {args.file}: {exc}") from exc
    return None if span is None else (span[1] - span[0]) / 1000


def _progress(
    report: FileReplayReport, span_s: float | None, speedup: float | None, done: bool
) -> ReplayProgress:
    """The replay's progress as the generator's: event seconds replayed, of ``span_s``."""
    total = span_s or 0.0
    paced = min(total, report.wall_s * speedup) if speedup else 0.0
    replayed = total if done else paced
    rate = report.produced / report.wall_s if report.wall_s > 0 else 0.0
    return ReplayProgress(report.produced, rate, replayed, total, speedup, done)
