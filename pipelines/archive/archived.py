"""What a topic's archive holds now: the declared types of its newest archived hour's columns.

A declaration change is checked against them (:mod:`pipelines.views.evolution`): the archive
keeps every hour, and the correction reads them all with one type per column.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.archive.schema import TYPE_METADATA, column_type
from pipelines.events.declaration import ColumnType
from pipelines.segments import archive_events_key, parse_range_name
from pipelines.storage import ObjectStore

__all__ = ["archived_types"]

_EVENTS_ROOT = archive_events_key(0, "t", 0, 0, 0).rsplit("hour=", 1)[0]


def archived_types(store: ObjectStore, topic: str) -> dict[str, ColumnType] | None:
    """The declared type of each column in ``topic``'s files of its newest archived hour (None
    when nothing of the topic is archived). Lists the whole events archive: fine locally, a
    long listing on a large S3 bucket."""
    newest: dict[str, list[str]] = {}
    for key in store.list(_EVENTS_ROOT):
        parsed = parse_range_name(key) if key.endswith(".parquet") else None
        if parsed is not None and parsed[0] == topic:
            hour = key[len(_EVENTS_ROOT) :].split("/", 1)[0]
            newest.setdefault(hour, []).append(key)
    if not newest:
        return None
    found: dict[str, ColumnType] = {}
    for key in newest[max(newest)]:
        try:
            schema = pq.read_schema(pa.BufferReader(store.get(key)))
        except FileNotFoundError:  # removed by a task discarding uncommitted ranges
            continue
        found.update(
            (f.name, column_type(f)) for f in schema if TYPE_METADATA in (f.metadata or {})
        )
    return found
