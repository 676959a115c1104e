"""`sluice tables migrate`: a store of the older layout into the views' tables.

Every segment's newest published batch version (``_published.json`` and its ``batch/v<N>/``
files, :mod:`pipelines.serving.older_layout`) is committed to the view's table with its
version number, then every other hour with realtime partial states is published as the
publisher would. With ``remove_old`` the manifests and batch directories are deleted
afterwards (the tables' history replaces them); the stream's partial states stay, they are
its working format.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from pipelines.segments import (
    HOUR_MS,
    parse_hour_label,
    read_parquet,
    view_prefix,
)
from pipelines.serving.older_layout import batch_dir, published_key, read_manifest
from pipelines.serving.publisher import RealtimePublisher
from pipelines.storage import ObjectStore
from pipelines.tables import BATCH, ViewTables, replace_hours, table_rows
from pipelines.views.model import View

__all__ = ["Migration", "migrate_store"]

log = logging.getLogger(__name__)


@dataclass
class Migration:
    batch_segments: dict[str, int] = field(default_factory=dict)
    realtime_hours: dict[str, int] = field(default_factory=dict)
    removed: int = 0


def _segments(store: ObjectStore, view: View) -> list[int]:
    labels = {key.split("/")[2] for key in store.list(view_prefix(view.name))}
    out = []
    for label in labels:
        try:
            out.append(parse_hour_label(label))
        except ValueError:
            continue
    return sorted(out)


def migrate_store(
    store: ObjectStore, tables: ViewTables, views: Sequence[View], remove_old: bool = False
) -> Migration:
    """Commit the older layout's corrections and realtime hours to the tables; what it did."""
    result = Migration()
    for view in views:
        migrated = []
        for segment in _segments(store, view):
            manifest = read_manifest(store, view.name, segment)
            if manifest is None:
                continue
            rows = pa.concat_tables([read_parquet(store.get(k)) for k in manifest.files])
            replace_hours(
                tables,
                view,
                range(segment, segment + view.segment_ms, HOUR_MS),
                lambda version, rows=rows, view=view: table_rows(view, rows, BATCH, version),
                source=BATCH,
                summary={
                    "run-id": "migration",
                    "events": str(manifest.events),
                    "duplicates-dropped": str(manifest.duplicates_dropped),
                    "archive-hours": ",".join(manifest.hours),
                },
                force_version=manifest.version,
            )
            migrated.append(segment)
        result.batch_segments[view.name] = len(migrated)
    publisher = RealtimePublisher(store, tables, views)
    published = publisher.publish_once()
    result.realtime_hours = {name: len(hours) for name, hours in published.committed.items()}
    if remove_old:
        for view in views:
            for segment in _segments(store, view):
                old = store.list(batch_dir(view.name, segment))
                for key in old + store.list(published_key(view.name, segment)):
                    store.delete(key)
                    result.removed += 1
    return result
