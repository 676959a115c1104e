"""Nothing lost: every offset a partition produced is in the raw archive exactly once.

A stream task archives each offset range ``[first, end)`` it consumed as event files (one per
event-time hour), dead-letter files (one per Kafka-timestamp hour) and, last, a range record
listing those files (:mod:`pipelines.archive.writer`). For an hour H this module checks:

1. Every range record carrying events or dead letters of H, in full: the ``offset`` columns of
   all the files it lists (every hour's events plus its dead letters) hold each offset of
   ``[first, end)`` exactly once, so archived + dead-lettered = produced. A listed file that
   is gone is named, and the offsets it held are reported missing.
   A partition split into key buckets (virtual tasks) archives each bucket's records in ranges
   of its own; the ranges that overlap are checked as one span.
2. The chain of a partition's range records: no hole between consecutive ranges, none below
   the offset the task checkpointed (flushes precede checkpoints), and, given the broker's
   offsets, none between the log start and the first archived offset, and no archived offset
   at or past the log end. A problem in the chain is reported in the hours carried by the
   ranges next to it: events are near time order, so those hours are the ones it shortens.

Reading order avoids false alarms while workers run: checkpoints before range records (a
checkpoint never passes the ranges flushed before it), broker offsets after them (the log end
only grows). The broker part is optional: pass its offsets, a function returning them for the
archived topics, or None for the archive alone. Pure data-plane code: no Dagster here.
"""

from __future__ import annotations

import itertools
import logging
import numbers
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.exceptions import CheckpointError
from pipelines.segments import (
    HOUR_MS,
    RangeRecord,
    archive_dead_letters_key,
    archive_events_key,
    hour_label,
    parse_hour_label,
    parse_task_checkpoint_key,
    read_parquet,
    read_range_records,
)
from pipelines.storage import ObjectStore
from pipelines.stream.checkpoint import load_checkpoint
from quality.completeness import merge_ranges

__all__ = [
    "BrokerOffsets",
    "HourLineage",
    "PartitionLineage",
    "check_nothing_lost",
    "format_offsets",
]

log = logging.getLogger(__name__)

MAX_LISTED = 5
"""Offset ranges a message lists before it says how many more there are."""
DEAD_LETTERS_PREFIX = "archive/dead_letters/"
CHECKPOINTS_PREFIX = "checkpoints/"

Ranges = tuple[tuple[int, int], ...]
BrokerOffsets = Mapping[tuple[str, int], tuple[int, int]]
"""Per ``(topic, partition)`` (a kafka ``TopicPartition`` fits): (log start, log end) offsets."""
BrokerSource = BrokerOffsets | Callable[[Sequence[str]], BrokerOffsets | None] | None


@dataclass(frozen=True)
class PartitionLineage:
    """One partition's share of an hour: the ranges carrying the hour, verified in full."""

    topic: str
    partition: int
    archived: Ranges = ()
    """Merged offset ranges of the range records that carry the hour."""
    events: int = 0
    """Rows in those ranges' event files (every hour's, not only this one's)."""
    dead_letters: int = 0
    produced: int = 0
    """Offsets those ranges claim: events + dead_letters when nothing is lost."""
    missing: Ranges = ()
    duplicated: Ranges = ()
    missing_files: tuple[str, ...] = ()
    broker: tuple[int, int] | None = None
    """The broker's (log start, log end), when it was asked."""
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def missing_count(self) -> int:
        return sum(b - a for a, b in self.missing)

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.source,
            "archived": [list(r) for r in self.archived],
            "events": self.events,
            "dead_letters": self.dead_letters,
            "produced": self.produced,
            "missing": [list(r) for r in self.missing],
            "missing_offsets": self.missing_count,
            "duplicated": [list(r) for r in self.duplicated],
            "missing_files": list(self.missing_files),
            "broker": list(self.broker) if self.broker else None,
            "passed": self.passed,
            "failures": list(self.failures),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class HourLineage:
    """Whether the archive lost anything around one hour, per partition."""

    hour_ms: int
    partitions: tuple[PartitionLineage, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return hour_label(self.hour_ms)

    @property
    def events(self) -> int:
        return sum(p.events for p in self.partitions)

    @property
    def dead_letters(self) -> int:
        return sum(p.dead_letters for p in self.partitions)

    @property
    def produced(self) -> int:
        return sum(p.produced for p in self.partitions)

    @property
    def missing(self) -> dict[str, Ranges]:
        return {p.source: p.missing for p in self.partitions if p.missing}

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(f for p in self.partitions for f in p.failures)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "hour": self.label,
            "events": self.events,
            "dead_letters": self.dead_letters,
            "produced": self.produced,
            "missing": {k: [list(r) for r in v] for k, v in self.missing.items()},
            "passed": self.passed,
            "failures": list(self.failures),
            "notes": [*self.notes, *(n for p in self.partitions for n in p.notes)],
            "partitions": {p.source: p.as_dict() for p in self.partitions},
        }


def format_offsets(ranges: Sequence[tuple[int, int]], limit: int = MAX_LISTED) -> str:
    """``[1200, 1300)``, ``1450`` and so on, at most ``limit`` of them, then how many more."""
    parts = [str(a) if b == a + 1 else f"[{a}, {b})" for a, b in ranges[:limit]]
    if len(ranges) > limit:
        parts.append(f"{len(ranges) - limit} more ranges")
    return ", ".join(parts)


def _count(ranges: Sequence[tuple[int, int]]) -> int:
    return sum(b - a for a, b in ranges)


def _runs(offsets: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique offsets as half-open runs of consecutive values."""
    if not len(offsets):
        return []
    breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(offsets)]))
    return [(int(offsets[s]), int(offsets[e - 1]) + 1) for s, e in zip(starts, ends, strict=True)]


def _broker_hint(ranges: Sequence[tuple[int, int]], broker: tuple[int, int] | None) -> str:
    """What a replay can still recover of ``ranges``, given the broker's log start."""
    if broker is None or not ranges:
        return ""
    start = broker[0]
    lowest = ranges[0][0]
    if lowest >= start:
        return f"; the broker still holds them, a replay from {lowest} recovers them"
    if ranges[-1][1] <= start:
        return f"; the broker no longer holds them (its log starts at {start}): they are lost"
    return (
        f"; the broker holds those from {start} on (a replay from {start} recovers them), "
        f"the older ones are lost"
    )


def _missing_text(
    source: str, ranges: list[tuple[int, int]], why: str, broker: tuple[int, int] | None
) -> str:
    count = _count(ranges)
    noun, verb = ("offset", "is") if count == 1 else ("offsets", "are")
    return (
        f"{noun} {format_offsets(ranges)} of {source} {verb} missing from the archive "
        f"({count} {noun}: {why}){_broker_hint(ranges, broker)}"
    )


# --- step 1: one range record, in full ---------------------------------------------------


@dataclass(frozen=True)
class _RangeCheck:
    events: int
    dead_letters: int
    missing: list[tuple[int, int]]
    duplicated: list[tuple[int, int]]
    stray: list[tuple[int, int]]
    missing_files: list[str]
    unreadable: list[str]


def _files_of(record: RangeRecord) -> tuple[str, ...]:
    """The files a record lists; records written before lists existed name them by layout."""
    if record.files:
        return record.files
    args = (record.topic, record.partition, record.first, record.end)
    return (
        *(archive_events_key(parse_hour_label(h), *args) for h, n in record.events.items() if n),
        *(
            archive_dead_letters_key(parse_hour_label(h), *args)
            for h, n in record.dead_letters.items()
            if n
        ),
    )


def _verify(store: ObjectStore, record: RangeRecord) -> _RangeCheck:
    """Offsets of every file of ``record`` (the ``offset`` column only) against [first, end)."""
    first, end = record.first, record.end
    counts = np.zeros(max(0, end - first), dtype=np.int64)
    events = dead = 0
    stray: list[np.ndarray] = []
    missing_files: list[str] = []
    unreadable: list[str] = []
    for key in _files_of(record):
        try:
            data = store.get(key)
        except FileNotFoundError:
            missing_files.append(key)
            continue
        try:
            column = read_parquet(data, ["offset"]).column("offset")
        except (pa.ArrowException, KeyError, ValueError) as exc:
            unreadable.append(f"{key} ({exc})")
            continue
        offsets = column.to_numpy().astype(np.int64, copy=False)
        if key.startswith(DEAD_LETTERS_PREFIX):
            dead += len(offsets)
        else:
            events += len(offsets)
        inside = (offsets >= first) & (offsets < end)
        if not inside.all():
            stray.append(offsets[~inside])
        counts += np.bincount(offsets[inside] - first, minlength=len(counts))
    strays = np.unique(np.concatenate(stray)) if stray else np.empty(0, np.int64)
    return _RangeCheck(
        events=events,
        dead_letters=dead,
        missing=_runs(np.flatnonzero(counts == 0) + first),
        duplicated=_runs(np.flatnonzero(counts > 1) + first),
        stray=_runs(strays),
        missing_files=missing_files,
        unreadable=unreadable,
    )


# --- step 2: the chain of a partition's ranges -------------------------------------------


@dataclass(frozen=True)
class _ChainIssue:
    """A problem between ranges, reported in the hours the neighbouring ranges carry."""

    hours: frozenset[str]
    missing: tuple[tuple[int, int], ...] = ()
    duplicated: tuple[tuple[int, int], ...] = ()
    failure: str | None = None
    note: str | None = None


def _hours(*records: RangeRecord) -> frozenset[str]:
    return frozenset(
        h
        for r in records
        for h, n in itertools.chain(r.events.items(), r.dead_letters.items())
        if n
    )


def _chain(
    records: list[RangeRecord], broker: tuple[int, int] | None, committed: int | None
) -> list[_ChainIssue]:
    """Holes and overlaps between a partition's ranges (sorted by first offset)."""
    source = records[0].source
    issues: list[_ChainIssue] = []
    head = records[0]
    if broker is not None and head.first > broker[0]:
        gap = [(broker[0], head.first)]
        why = f"the archive starts at {head.first}, the broker's log at {broker[0]}"
        issues.append(
            _ChainIssue(_hours(head), tuple(gap), failure=_missing_text(source, gap, why, broker))
        )
    last = head
    for record in records[1:]:
        if record.first > last.end:
            gap = [(last.end, record.first)]
            why = f"no range record covers them, between ranges ending {last.end} and starting {record.first}"
            issues.append(
                _ChainIssue(
                    _hours(last, record),
                    tuple(gap),
                    failure=_missing_text(source, gap, why, broker),
                )
            )
        elif record.first < last.end:
            overlap = [(record.first, min(last.end, record.end))]
            issues.append(
                _ChainIssue(
                    _hours(last, record),
                    duplicated=tuple(overlap),
                    failure=f"offsets {format_offsets(overlap)} of {source} are archived twice: "
                    f"ranges [{last.first}, {last.end}) and [{record.first}, {record.end}) overlap",
                )
            )
        if record.end >= last.end:
            last = record
    archived_end = last.end
    if committed is not None and committed > archived_end:
        gap = [(archived_end, committed)]
        why = f"the task checkpointed offset {committed} but the archive ends at {archived_end}"
        issues.append(
            _ChainIssue(_hours(last), tuple(gap), failure=_missing_text(source, gap, why, broker))
        )
    if broker is not None and archived_end > broker[1]:
        issues.append(
            _ChainIssue(
                _hours(last),
                failure=f"the archive of {source} ends at offset {archived_end} but the broker's "
                f"log ends at {broker[1]}: offsets [{broker[1]}, {archived_end}) came from a log "
                f"the broker no longer has (topic recreated or broker state lost?)",
            )
        )
    elif broker is not None and archived_end < broker[1]:
        pending = max(archived_end, committed or 0)
        if pending < broker[1]:
            issues.append(
                _ChainIssue(
                    _hours(last),
                    note=f"{source}: offsets [{pending}, {broker[1]}) are on the broker but not "
                    f"archived yet (the task has not flushed them)",
                )
            )
    return issues


# --- inputs ------------------------------------------------------------------------------


def _committed_offsets(store: ObjectStore, topic: str | None) -> tuple[dict, list[str]]:
    """The next offset of every task checkpoint (of ``topic`` if given), and unreadable ones."""
    prefix = f"{CHECKPOINTS_PREFIX}{topic}/" if topic else CHECKPOINTS_PREFIX
    committed: dict[tuple[str, int], int] = {}
    problems: list[str] = []
    tasks = {parsed[:4] for key in store.list(prefix) if (parsed := parse_task_checkpoint_key(key))}
    for name, partition, bucket, factor in sorted(tasks):
        try:
            checkpoint = load_checkpoint(store, name, partition, bucket, factor)
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        if checkpoint is not None:  # a split partition: the least of its buckets' offsets
            offset = committed.get((name, partition), checkpoint.next_offset)
            committed[(name, partition)] = min(offset, checkpoint.next_offset)
    return committed, problems


def _spans(records: list[RangeRecord]) -> list[RangeRecord]:
    """A partition's records as the spans to verify: each range of a whole-partition task, and
    for key buckets (virtual tasks), the ranges that overlap joined into one, whose files
    together must hold every offset once. Buckets cut their ranges at the same aligned offsets
    (:data:`pipelines.archive.writer.ALIGN_OFFSETS`), so a joined span stays short."""
    if all(r.factor == 1 for r in records):
        return records
    spans: list[list[RangeRecord]] = []
    end = None
    for record in sorted(records, key=lambda r: (r.first, r.end)):
        if spans and end is not None and record.first < end:
            spans[-1].append(record)
            end = max(end, record.end)
        else:
            spans.append([record])
            end = record.end
    return [group[0] if len(group) == 1 else _joined(group) for group in spans]


def _joined(group: list[RangeRecord]) -> RangeRecord:
    events: dict[str, int] = defaultdict(int)
    dead: dict[str, int] = defaultdict(int)
    for record in group:
        for hour, n in record.events.items():
            events[hour] += n
        for hour, n in record.dead_letters.items():
            dead[hour] += n
    return RangeRecord(
        group[0].topic,
        group[0].partition,
        min(r.first for r in group),
        max(r.end for r in group),
        dict(events),
        dict(dead),
        tuple(f for r in group for f in _files_of(r)),
    )


def _broker_offsets(source: BrokerSource, topics: Sequence[str]) -> dict[tuple[str, int], tuple]:
    offsets = source(topics) if callable(source) else source
    if offsets is None:
        return {}
    result = {}
    for key, bounds in offsets.items():
        topic, partition = key
        start, end = (int(v) for v in bounds)
        if not 0 <= start <= end:
            raise ValueError(
                f"broker offsets of {topic}-{partition}: log start {start} and end {end} "
                f"must satisfy 0 <= start <= end"
            )
        result[(str(topic), int(partition))] = (start, end)
    return result


def _hour_starts(hours: Iterable[int]) -> list[int]:
    hours = list(hours)
    bad = [h for h in hours if not isinstance(h, numbers.Integral) or h % HOUR_MS]
    if bad:
        raise ValueError(f"hours must be epoch-ms starts of UTC hours, got {bad[:MAX_LISTED]}")
    return [int(h) for h in hours]


# --- the check -----------------------------------------------------------------------------


def check_nothing_lost(
    store: ObjectStore,
    hours: Iterable[int] | None = None,
    topic: str | None = None,
    broker_offsets: BrokerSource = None,
    checkpoints: bool = True,
) -> list[HourLineage]:
    """Per hour (epoch-ms hour starts; None = every archived hour), whether anything was lost.

    ``broker_offsets`` maps ``(topic, partition)`` to the broker's (log start, log end), or is
    a function of the archived topics returning that map (None when no broker answers); it is
    called after the range records are read. ``checkpoints`` also holds the archive to the
    offsets the tasks checkpointed.
    """
    wanted = None if hours is None else _hour_starts(hours)
    committed, checkpoint_problems = _committed_offsets(store, topic) if checkpoints else ({}, [])
    records = read_range_records(store, topic)
    by_source: dict[tuple[str, int], list[RangeRecord]] = defaultdict(list)
    for record in records:
        by_source[(record.topic, record.partition)].append(record)
    by_source = defaultdict(list, {key: _spans(recs) for key, recs in by_source.items()})
    records = [r for recs in by_source.values() for r in recs]
    topics = sorted({t for t, _ in by_source} | {t for t, _ in committed} | ({topic} - {None}))
    broker = {k: v for k, v in _broker_offsets(broker_offsets, topics).items() if k[0] in topics}
    chains = {
        key: _chain(recs, broker.get(key), committed.get(key)) for key, recs in by_source.items()
    }
    # partitions without any range record: nothing to attribute to an hour, so every hour says so
    orphans, hour_notes = [], [*checkpoint_problems]
    for key in sorted((set(committed) | set(broker)) - set(by_source)):
        name = f"{key[0]}-{key[1]}"
        start, end = broker.get(key, (0, None))
        if committed.get(key, 0) > 0:
            gap = [(start if start < committed[key] else 0, committed[key])]
            why = f"the task checkpointed offset {committed[key]} but no range record exists"
            orphans.append(
                PartitionLineage(
                    key[0],
                    key[1],
                    missing=tuple(gap),
                    broker=broker.get(key),
                    failures=(_missing_text(name, gap, why, broker.get(key)),),
                )
            )
        elif end is not None and end > start:
            hour_notes.append(f"{name}: nothing archived yet; the broker holds [{start}, {end})")

    carried = {id(r): _hours(r) for r in records}
    if wanted is None:
        wanted = sorted({parse_hour_label(h) for labels in carried.values() for h in labels})
    verified: dict[int, _RangeCheck] = {}  # a range carrying several hours is read once
    result = []
    for hour in wanted:
        label = hour_label(hour)
        partitions = []
        for key, recs in by_source.items():
            mine = [r for r in recs if label in carried[id(r)]]
            if not mine:
                continue
            for r in mine:
                if id(r) not in verified:
                    verified[id(r)] = _verify(store, r)
            checks = [(r, verified[id(r)]) for r in mine]
            issues = [i for i in chains[key] if label in i.hours]
            partitions.append(_partition(key, checks, issues, broker.get(key)))
        result.append(HourLineage(hour, tuple([*partitions, *orphans]), notes=tuple(hour_notes)))
    for hour in result:
        if not hour.passed:
            log.warning("%s: %s", hour.label, "; ".join(hour.failures))
    return result


def _partition(
    key: tuple[str, int],
    checks: list[tuple[RangeRecord, _RangeCheck]],
    issues: list[_ChainIssue],
    broker: tuple[int, int] | None,
) -> PartitionLineage:
    source = f"{key[0]}-{key[1]}"
    failures: list[str] = []
    in_files: list[tuple[int, int]] = []
    for record, check in checks:
        span = f"range [{record.first}, {record.end})"
        failures += [f"{source}: {span} lists {f}, which is missing" for f in check.missing_files]
        failures += [f"{source}: {span} lists {f}, which cannot be read" for f in check.unreadable]
        if check.stray:
            failures.append(
                f"{source}: the files of {span} hold offsets outside it: "
                f"{format_offsets(check.stray)}"
            )
        in_files += check.missing
    in_files = merge_ranges(in_files)
    if in_files:
        why = "absent from the files their range records list"
        failures.append(_missing_text(source, in_files, why, broker))
    duplicated = merge_ranges([d for _, c in checks for d in c.duplicated])
    if duplicated:
        failures.append(f"offsets {format_offsets(duplicated)} of {source} are archived twice")
    failures += [i.failure for i in issues if i.failure]
    missing = merge_ranges([*in_files, *(m for i in issues for m in i.missing)])
    return PartitionLineage(
        topic=key[0],
        partition=key[1],
        archived=tuple(merge_ranges([(r.first, r.end) for r, _ in checks])),
        events=sum(c.events for _, c in checks),
        dead_letters=sum(c.dead_letters for _, c in checks),
        produced=sum(r.end - r.first for r, _ in checks),
        missing=tuple(missing),
        duplicated=tuple(merge_ranges([*duplicated, *(d for i in issues for d in i.duplicated)])),
        missing_files=tuple(f for _, c in checks for f in c.missing_files),
        broker=broker,
        failures=tuple(failures),
        notes=tuple(i.note for i in issues if i.note),
    )
