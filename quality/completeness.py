"""How complete the raw archive is, per hour, from the range records the stream tasks write.

Each flush of a task writes ``archive/ranges/<topic>/<partition>/<first>-<end>.json``: the
offset range ``[first, end)`` it archived and its event and dead-letter counts per hour.
From those records an hour's completeness is: which partitions hold events of that hour,
which offset ranges carried them, whether offsets are missing between those ranges (a gap
means data the archive never received), and whether every such partition has moved on past
the hour (so only late events can still arrive). Pure data-plane code: no Dagster here.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipelines.segments import RangeRecord, hour_label, parse_hour_label, read_range_records
from pipelines.storage import ObjectStore

__all__ = [
    "HourCompleteness",
    "archive_completeness",
    "merge_ranges",
]


@dataclass(frozen=True)
class HourCompleteness:
    """What the archive holds for one event-time hour."""

    hour_ms: int
    events: int = 0
    dead_letters: int = 0
    """Dead letters archived under this hour (by their Kafka timestamp)."""
    range_records: int = 0
    offset_ranges: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per ``topic-partition``: merged offset ranges whose records carry events of this hour."""
    gaps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per ``topic-partition``: offsets between those ranges that no record covers."""
    open_partitions: tuple[str, ...] = ()
    """Partitions with events in this hour but none later yet: the hour may still grow."""

    @property
    def label(self) -> str:
        return hour_label(self.hour_ms)

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(sorted(self.offset_ranges))

    @property
    def complete(self) -> bool:
        """Events present, no offset gaps, and every partition has moved past the hour."""
        return self.events > 0 and not self.gaps and not self.open_partitions

    def as_dict(self) -> dict[str, Any]:
        return {
            "hour": self.label,
            "events": self.events,
            "dead_letters": self.dead_letters,
            "range_records": self.range_records,
            "partitions": list(self.partitions),
            "offset_ranges": {k: [list(r) for r in v] for k, v in self.offset_ranges.items()},
            "gaps": {k: [list(r) for r in v] for k, v in self.gaps.items()},
            "open_partitions": list(self.open_partitions),
            "complete": self.complete,
        }


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted half-open offset ranges, overlapping or touching ones joined."""
    merged: list[tuple[int, int]] = []
    for first, end in sorted(ranges):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((first, end))
    return merged


def archive_completeness(
    store: ObjectStore, hours: Iterable[int], topic: str | None = None
) -> list[HourCompleteness]:
    """Completeness of each hour in ``hours`` (epoch-ms hour starts), in the order given."""
    records = read_range_records(store, topic)
    by_source: dict[str, list[RangeRecord]] = defaultdict(list)
    for record in records:
        by_source[record.source].append(record)
    latest_hour: dict[str, int] = {}
    for source, recs in by_source.items():
        labels = [label for r in recs for label, n in r.events.items() if n > 0]
        if labels:
            latest_hour[source] = max(parse_hour_label(label) for label in labels)
    result = []
    for hour in hours:
        label = hour_label(hour)
        events = sum(r.events.get(label, 0) for r in records)
        dead = sum(r.dead_letters.get(label, 0) for r in records)
        touching = [r for r in records if r.events.get(label, 0) or r.dead_letters.get(label, 0)]
        offset_ranges: dict[str, list[tuple[int, int]]] = {}
        gaps: dict[str, list[tuple[int, int]]] = {}
        open_sources = []
        for source in sorted({r.source for r in touching}):
            mine = [r for r in touching if r.source == source]
            lo, hi = min(r.first for r in mine), max(r.end for r in mine)
            offset_ranges[source] = merge_ranges([(r.first, r.end) for r in mine])
            # every record of the partition within [lo, hi) counts as coverage
            covered = merge_ranges(
                [(r.first, r.end) for r in by_source[source] if r.end > lo and r.first < hi]
            )
            holes = [(a[1], b[0]) for a, b in itertools.pairwise(covered) if a[1] < b[0]]
            if holes:
                gaps[source] = holes
            if any(r.events.get(label, 0) for r in mine) and latest_hour.get(source, hour) <= hour:
                open_sources.append(source)
        result.append(
            HourCompleteness(
                hour_ms=hour,
                events=events,
                dead_letters=dead,
                range_records=len(touching),
                offset_ranges=offset_ranges,
                gaps=gaps,
                open_partitions=tuple(open_sources),
            )
        )
    return result
