"""Where a query reads: the view's table (corrections and the realtime rows the publisher
committed), or the stream's per-task partial states of each segment (``prefer="realtime"``),
read through :func:`pipelines.segments.read_realtime` so that a split's or merge's rewrite is
seen whole."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.segments import HOUR_MS, read_parquet, read_realtime, view_prefix
from pipelines.storage import ObjectStore
from pipelines.tables import AsOf, Tables, batch_hours
from pipelines.views.model import View

__all__ = [
    "MAX_PROBED_SEGMENTS",
    "SOURCE",
    "SegmentSource",
    "check_prefer",
    "corrected_segments",
    "require_table",
    "segment_sources",
]

SOURCE = "source"
"""The output column saying where a row came from: ``realtime`` or ``batch v<N>``."""

MAX_PROBED_SEGMENTS = 2000


@dataclass(frozen=True)
class SegmentSource:
    """The stream's partial-state files of one segment, as read together."""

    segment_start_ms: int
    files: tuple[str, ...]
    data: tuple[bytes, ...]
    """Each file's bytes, in the order of ``files``."""

    def tables(self) -> list[pa.Table]:
        return [read_parquet(blob) for blob in self.data]

    @property
    def label(self) -> str:
        return "realtime"


def check_prefer(prefer: str, as_of: AsOf | None) -> None:
    """``prefer`` is newest, realtime or batch; only the table (not ``realtime``) has snapshots."""
    if prefer not in ("newest", "realtime", "batch"):
        raise QueryError(f"prefer must be newest, realtime or batch, got {prefer!r}")
    if as_of is not None and prefer == "realtime":
        raise QueryError("realtime partials have no snapshots")


def require_table(store: ObjectStore, tables: Tables, view: View) -> None:
    """A view without a table yet: say why, or that the storage root cannot be read."""
    if tables.find(view.name) is not None:
        return
    written = bool(store.list(view_prefix(view.name)))  # also: is the root reachable at all
    raise QueryError(
        f"{view.name} has no Iceberg table yet"
        + (
            " but the storage root holds its segments: the fleet's publisher creates it within "
            "SLUICE_PUBLISH_INTERVAL_S of a running stream's first flush, and a store written "
            "before the tables needs `sluice tables migrate`; --prefer realtime reads the "
            "stream's partial states now"
            if written
            else " (nothing published or corrected)"
        )
    )


def segment_sources(
    store: ObjectStore, view: View, start_ms: int, end_ms: int
) -> list[SegmentSource]:
    """Per segment in range that has any, the stream's partial-state files of every task, all
    read in one :func:`~pipelines.segments.read_realtime` (segments probed one by one for
    short ranges, the view listed for long)."""
    first = view.segment_start(start_ms)
    if (end_ms - first) // view.segment_ms <= MAX_PROBED_SEGMENTS:
        found = read_realtime(store, view.name, range(first, end_ms, view.segment_ms))
    else:
        found = {s: f for s, f in read_realtime(store, view.name).items() if first <= s < end_ms}
    return [
        SegmentSource(segment, tuple(k for k, _ in files), tuple(d for _, d in files))
        for segment, files in sorted(found.items())
    ]


def corrected_segments(tables: Tables, view: View, segments: list[int]) -> dict[int, int]:
    """Segment -> rows of its newest correction, for the ``segments`` that have one."""
    table = tables.find(view.name)
    if table is None or not segments:
        return {}
    hours = [h for s in segments for h in range(s, s + view.segment_ms, HOUR_MS)]
    out: dict[int, int] = {}
    for hour, rows in batch_hours(table, view, hours, count=True).items():
        segment = view.segment_start(hour)
        out[segment] = out.get(segment, 0) + rows
    return out
