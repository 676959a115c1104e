"""The raw archive of valid events and dead letters, by event-time hour.

May import: ``pipelines.events``, ``pipelines.segments``, ``pipelines.storage``.
"""

from pipelines.archive.schema import archive_schema
from pipelines.archive.writer import (
    DEAD_LETTER_SCHEMA,
    ArchiveBuffer,
    counted_until,
    discard_uncommitted,
)

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "ArchiveBuffer",
    "archive_schema",
    "counted_until",
    "discard_uncommitted",
]
