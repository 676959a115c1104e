"""What to serve for each segment of a range: the newest published batch version, or the
realtime partials of every task (Druid's overshadowing, per segment as a whole)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pipelines.exceptions import QueryError
from pipelines.segments import (
    HOUR_MS,
    parse_hour_label,
    published_key,
    read_manifest,
    read_parquet,
    realtime_prefix,
    view_prefix,
)
from pipelines.storage import ObjectStore
from pipelines.tables import AsOf, ViewTables, batch_hours, tables_for
from pipelines.views.model import View

__all__ = [
    "MAX_PROBED_SEGMENTS",
    "SOURCE",
    "SegmentSource",
    "corrected_segments",
    "require_table",
    "segment_sources",
    "table_source",
]

log = logging.getLogger(__name__)

SOURCE = "source"
"""The output column saying where a row came from: ``realtime`` or ``batch v<N>``."""

MAX_PROBED_SEGMENTS = 2000


@dataclass(frozen=True)
class SegmentSource:
    segment_start_ms: int
    kind: str  # "realtime" or "batch"
    version: int
    files: tuple[str, ...]

    @property
    def label(self) -> str:
        return "realtime" if self.kind == "realtime" else f"batch v{self.version}"


def table_source(store: ObjectStore, prefer: str, as_of: AsOf | None) -> ViewTables | None:
    """The tables to read for ``prefer``, or None to read the segments (an older store, or
    ``realtime``: the stream's partial states)."""
    if prefer not in ("newest", "realtime", "batch"):
        raise QueryError(f"prefer must be newest, realtime or batch, got {prefer!r}")
    tables = tables_for(store)
    if as_of is not None and (tables is None or prefer == "realtime"):
        raise QueryError(
            "--as-of reads a snapshot of a view's Iceberg table; this store has none (run "
            "`sluice tables migrate`)"
            if tables is None
            else "realtime partials have no snapshots"
        )
    return None if prefer == "realtime" else tables


def require_table(store: ObjectStore, tables: ViewTables, view: View) -> None:
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
    store: ObjectStore, view: View, start_ms: int, end_ms: int, prefer: str = "newest"
) -> list[SegmentSource]:
    """Per segment in range, what to serve: ``newest`` version, or only ``realtime``/``batch``."""
    if prefer not in ("newest", "realtime", "batch"):
        raise QueryError(f"prefer must be newest, realtime or batch, got {prefer!r}")
    sources = []
    for segment in _segments_in_range(store, view, start_ms, end_ms):
        manifest = None if prefer == "realtime" else read_manifest(store, view.name, segment)
        if manifest is not None:
            sources.append(SegmentSource(segment, "batch", manifest.version, manifest.files))
        elif prefer != "batch":
            files = tuple(store.list(realtime_prefix(view.name, segment)))
            if files:
                sources.append(SegmentSource(segment, "realtime", 0, files))
    return sources


def _segments_in_range(store: ObjectStore, view: View, start_ms: int, end_ms: int) -> list[int]:
    """Segment starts overlapping the range: probed one by one for short ranges, listed for long."""
    first = view.segment_start(start_ms)
    if (end_ms - first) // view.segment_ms <= MAX_PROBED_SEGMENTS:
        return list(range(first, end_ms, view.segment_ms))
    labels = {key.split("/")[2] for key in store.list(view_prefix(view.name))}
    starts = sorted(parse_hour_label(label) for label in labels)
    return [s for s in starts if first <= s < end_ms]


def corrected_segments(store: ObjectStore, view: View, segments: list[int]) -> dict[int, int]:
    """Segment -> rows of its newest correction, for the ``segments`` that have one (from the
    view's table, or the older layout's manifests)."""
    tables = tables_for(store)
    if tables is not None:
        table = tables.find(view.name)
        if table is None or not segments:
            _warn_if_older_layout(store, view, segments)
            return {}
        hours = [h for s in segments for h in range(s, s + view.segment_ms, HOUR_MS)]
        found = batch_hours(table, view, hours, count=True)
        out: dict[int, int] = {}
        for hour, rows in found.items():
            segment = view.segment_start(hour)
            out[segment] = out.get(segment, 0) + rows
        _warn_if_older_layout(store, view, [s for s in segments if s not in out])
        return out
    out = {}
    for segment in segments:
        manifest = read_manifest(store, view.name, segment)
        if manifest is None:
            continue
        if manifest.rows is not None:
            out[segment] = manifest.rows
        else:
            out[segment] = sum(read_parquet(store.get(k)).num_rows for k in manifest.files)
    return out


_warned: set[tuple[str, str]] = set()


def _warn_if_older_layout(store: ObjectStore, view: View, segments: list[int]) -> None:
    """Say once per view when corrections of the older layout are left unread."""
    if (store.root, view.name) in _warned:
        return
    for segment in segments[:3]:
        if store.exists(published_key(view.name, segment)):
            _warned.add((store.root, view.name))
            log.warning(
                "%s: corrections of the older layout (_published.json) are not read once the "
                "views are Iceberg tables; run `sluice tables migrate` (docs/serving.md)",
                view.name,
            )
            return
