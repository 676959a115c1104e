"""Range records: what one flush of one task archived, written after its files.

``archive/ranges/<topic>/<partition>/<first>-<end>.json`` holds the offset range
``[first, end)``, the events and dead letters it archived per hour, and the files it wrote; the
nothing-lost check and the completeness of an hour are read from them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pipelines.segments.layout import RANGES_PREFIX
from pipelines.segments.time import parse_hour_label
from pipelines.storage import ObjectStore

__all__ = ["RangeRecord", "hours_with_events", "read_range_records"]


@dataclass(frozen=True)
class RangeRecord:
    """One archived offset range of one topic partition."""

    topic: str
    partition: int
    first: int
    end: int
    events: dict[str, int]
    dead_letters: dict[str, int]
    files: tuple[str, ...] = ()
    """The archive files the range wrote (events of each hour, dead letters of each hour)."""
    bucket: int = 0
    factor: int = 1
    """The key bucket of a virtual task (bucket of factor): it archived only that bucket's
    records of [first, end); 0 of 1 is the whole partition."""

    @property
    def source(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "files": list(self.files)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RangeRecord:
        raw = json.loads(data)
        return cls(
            topic=raw["topic"],
            partition=int(raw["partition"]),
            first=int(raw["first"]),
            end=int(raw["end"]),
            events={k: int(v) for k, v in raw.get("events", {}).items()},
            dead_letters={k: int(v) for k, v in raw.get("dead_letters", {}).items()},
            files=tuple(raw.get("files", ())),
            bucket=int(raw.get("bucket", 0)),
            factor=int(raw.get("factor", 1)),
        )


def read_range_records(store: ObjectStore, topic: str | None = None) -> list[RangeRecord]:
    """Every range record under the archive (of ``topic`` if given), sorted by source and offset."""
    prefix = f"{RANGES_PREFIX}{topic}/" if topic else RANGES_PREFIX
    records = []
    for key in store.list(prefix):
        if not key.endswith(".json"):
            continue
        try:
            records.append(RangeRecord.from_json(store.get(key)))
        except FileNotFoundError:  # removed by a task discarding uncommitted ranges
            continue
    records.sort(key=lambda r: (r.topic, r.partition, r.first))
    return records


def hours_with_events(store: ObjectStore, topic: str | None = None) -> list[int]:
    """Hour starts (epoch ms) the range records say hold at least one archived event."""
    return sorted(
        {
            parse_hour_label(label)
            for record in read_range_records(store, topic)
            for label, n in record.events.items()
            if n > 0
        }
    )
