"""Replay a file of one's own events (JSON Lines, CSV or Parquet) as JSON objects, paced by
their event time at a speedup like the generator's replay, or as fast as they are taken.

A row that cannot be read, or has no readable time when pacing, is reported with its line
(or row) number and skipped: one bad row never stops a replay. A JSON Lines or CSV file may be
gzipped (``.jsonl.gz``): its format is the extension before ``.gz``.
"""

from __future__ import annotations

import csv
import gzip
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.events.declaration import ColumnType, TimeFormat, TopicDeclaration, parse_path
from pipelines.events.times import read_time_ms
from pipelines.generator.pacing import wait_until_due

__all__ = [
    "FILE_FORMATS",
    "BadRow",
    "FileReplayReport",
    "TimeField",
    "read_rows",
    "replay_file",
    "time_span",
]

FILE_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
"""File extensions and the format each means."""


@dataclass(frozen=True)
class BadRow:
    line: int
    """The line (JSON Lines, CSV) or 1-based row (Parquet) in the file."""
    reason: str


@dataclass(frozen=True)
class TimeField:
    """Where a row's event time is and how it reads (``format`` None: by magnitude or ISO)."""

    path: str
    format: TimeFormat | None = None
    pattern: str | None = None
    zone: str = "UTC"

    def read_ms(self, row: dict[str, Any]) -> int:
        return read_time_ms(_at(row, parse_path(self.path)), self.format, self.pattern, self.zone)


@dataclass
class FileReplayReport:
    produced: int = 0
    bad: list[BadRow] = field(default_factory=list)
    wall_s: float = 0.0
    stopped: bool = False
    """Interrupted before the end of the file."""


def _at(row: Any, steps: tuple[str | int, ...]) -> Any:
    for step in steps:
        if isinstance(step, int):
            if not isinstance(row, list) or step >= len(row):
                return None
            row = row[step]
        else:
            if not isinstance(row, dict):
                return None
            row = row.get(step)
    return row


def format_of(path: Path, given: str | None = None) -> str:
    """``given``, else the format ``path``'s extension names; ValueError when neither says."""
    if given:
        return given
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes.pop()
    found = FILE_FORMATS.get(suffixes[-1]) if suffixes else None
    if found is None:
        raise ValueError(
            f"{path}: cannot tell the format from {path.suffix or 'no extension'!r}; "
            "give --format jsonl, csv or parquet"
        )
    return found


def _typed(value: str, kind: ColumnType, nullable: bool) -> Any:
    if value == "" and nullable:
        return None
    if kind is ColumnType.LONG:
        return int(value)
    if kind is ColumnType.DOUBLE:
        return float(value)
    if kind is ColumnType.BOOLEAN:
        lowered = value.strip().lower()
        if lowered not in ("true", "false", "1", "0"):
            raise ValueError(f"{value!r} is not a boolean")
        return lowered in ("true", "1")
    return value


def _csv_types(declaration: TopicDeclaration | None) -> dict[str, tuple[ColumnType, bool, str]]:
    """CSV header -> (type, nullable, path in the JSON object), from the declaration."""
    if declaration is None:
        return {}
    types: dict[str, tuple[ColumnType, bool, str]] = {}
    for f in declaration.fields:
        kind = f.type
        if kind is ColumnType.TIMESTAMP:
            epoch = f.format is None or f.format.value.startswith("epoch")
            kind = ColumnType.LONG if epoch else ColumnType.STRING
        where = f.path or f.name
        types[f.name] = types[where] = (kind, f.nullable, where)
    et = declaration.event_time
    if et.source == "field":
        where = et.path or "event_time"
        epoch = et.format.value.startswith("epoch")
        types.setdefault(where, (ColumnType.LONG if epoch else ColumnType.STRING, False, where))
    return types


def _put(row: dict[str, Any], where: str, value: Any) -> None:
    steps = parse_path(where)
    if any(isinstance(s, int) for s in steps):
        row[where] = value
        return
    for step in steps[:-1]:
        row = row.setdefault(step, {})
    row[steps[-1]] = value


def _open(path: Path, mode: str, **kwargs: Any) -> Any:
    """``path``, read through gzip when its name ends in ``.gz``."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, mode if mode == "rb" else "rt", **kwargs)
    return path.open(mode, **kwargs)


def read_rows(
    path: Path, file_format: str, declaration: TopicDeclaration | None = None
) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    """Each row as (line, JSON object), or (line, :class:`BadRow`) for one that cannot be read."""
    if file_format == "jsonl":
        with _open(path, "rb") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError as exc:
                    yield line_no, BadRow(line_no, f"not JSON: {exc}")
                    continue
                if isinstance(value, dict):
                    yield line_no, value
                else:
                    yield line_no, BadRow(line_no, f"not a JSON object: {type(value).__name__}")
    elif file_format == "csv":
        types = _csv_types(declaration)
        with _open(path, "r", newline="") as handle:
            reader = csv.DictReader(handle)
            for raw in reader:
                line_no = reader.line_num
                if None in raw or any(v is None for v in raw.values()):
                    yield line_no, BadRow(line_no, "the row's cells do not match the header")
                    continue
                row: dict[str, Any] = {}
                try:
                    for name, cell in raw.items():
                        kind, nullable, where = types.get(name, (ColumnType.STRING, False, name))
                        _put(row, where, _typed(cell, kind, nullable))
                except ValueError as exc:
                    yield line_no, BadRow(line_no, f"column {name}: {exc}")
                    continue
                yield line_no, row
    elif file_format == "parquet":
        import pyarrow.parquet as pq

        row_no = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            for value in batch.to_pylist():
                row_no += 1
                yield row_no, {k: _jsonable(v) for k, v in value.items()}
    else:
        raise ValueError(f"unknown file format {file_format!r}: jsonl, csv or parquet")


def time_span(
    rows: Iterator[tuple[int, dict[str, Any] | BadRow]], time_field: TimeField
) -> tuple[int, int] | None:
    """The earliest and latest readable event time of ``rows``, epoch ms (None: no row has
    one): what a replay of them covers, before it starts."""
    first = last = None
    for _, row in rows:
        if isinstance(row, BadRow):
            continue
        try:
            at_ms = time_field.read_ms(row)
        except (ValueError, TypeError, OverflowError):
            continue
        first = at_ms if first is None else min(first, at_ms)
        last = at_ms if last is None else max(last, at_ms)
    return None if first is None else (first, last)


def _jsonable(value: Any) -> Any:
    """Parquet's dates and times as ISO-8601 strings; the rest as pyarrow gives them."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def replay_file(
    rows: Iterator[tuple[int, dict[str, Any] | BadRow]],
    send: Callable[[bytes | None, bytes], None],
    *,
    key_field: str | None = None,
    time_field: TimeField | None = None,
    speedup: float | None = None,
    on_bad: Callable[[BadRow], None] | None = None,
    progress: Callable[[FileReplayReport], None] | None = None,
    progress_every_s: float = 1.0,
) -> FileReplayReport:
    """Send each row as a JSON object; with ``speedup``, each when wall time since the start
    reaches (its time - the first row's time) / speedup. KeyboardInterrupt ends the replay
    early (``stopped``), after the rows already sent."""
    report = FileReplayReport()
    started = time.monotonic()
    next_progress = started + progress_every_s
    first_ms: int | None = None
    key_steps = parse_path(key_field) if key_field else None

    def bad(row: BadRow) -> None:
        report.bad.append(row)
        if on_bad is not None:
            on_bad(row)

    try:
        for line_no, row in rows:
            if isinstance(row, BadRow):
                bad(row)
                continue
            if speedup is not None:
                if time_field is None:
                    raise ValueError("pacing needs a time field")
                try:
                    at_ms = time_field.read_ms(row)
                except (ValueError, TypeError, OverflowError) as exc:
                    bad(BadRow(line_no, f"no readable time at {time_field.path}: {exc}"))
                    continue
                if first_ms is None:
                    first_ms = at_ms
                wait_until_due(started, (at_ms - first_ms) / 1000, speedup)
            key = None
            if key_steps is not None:
                value = _at(row, key_steps)
                key = None if value is None else str(value).encode()
            send(key, json.dumps(row, separators=(",", ":")).encode())
            report.produced += 1
            now = time.monotonic()
            if progress is not None and now >= next_progress:
                report.wall_s = now - started
                progress(report)
                next_progress = now + progress_every_s
    except KeyboardInterrupt:
        report.stopped = True
    report.wall_s = time.monotonic() - started
    return report
