"""What of a topic's declaration the raw archive can hold yet.

The archive's Parquet schema (:data:`pipelines.archive.writer.ARCHIVE_SCHEMA`), and the Spark
correction that reads it, hold one shape of event: the columns of the shipped declaration
(``data/topics.yaml``), none nullable, deduplicated by ``event_id``. A declaration may read
them from any JSON shape (paths into nested objects, any time format), but until the archive
follows the declaration (issue 46) the loader refuses one whose columns differ, rather than
accept it and fail at the first flush.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines.archive.writer import ARCHIVE_SCHEMA
from pipelines.events.declaration import EVENT_TIME, ColumnType, TopicDeclaration

__all__ = ["unsupported"]

_KAFKA_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp")
_TYPES = {pa.string(): ColumnType.STRING, pa.int64(): ColumnType.LONG}
_ID = "event_id"


def unsupported(declaration: TopicDeclaration) -> list[str]:
    """Why the archive cannot hold ``declaration``'s events yet (empty: it can)."""
    held = {
        f.name: _TYPES[f.type]
        for f in ARCHIVE_SCHEMA
        if f.name not in (*_KAFKA_COLUMNS, EVENT_TIME)
    }
    declared = {f.name: f.type for f in declaration.fields}
    found = []
    if declared != held:
        wanted = ", ".join(f"{name} ({kind.value})" for name, kind in held.items())
        found.append(
            f"columns other than the archive's ({wanted}) are not supported yet (issue 46: "
            "the archive and the correction following the declaration)"
        )
    if any(f.nullable for f in declaration.fields) or declaration.on_type_error == "null":
        found.append("nullable columns and on_type_error: null are not supported yet (issue 46)")
    if declaration.id != _ID:
        found.append(f"an id other than {_ID!r} is not supported yet (issue 46)")
    if declaration.record.columns():
        found.append("record columns are not supported yet (issue 46)")
    return found
