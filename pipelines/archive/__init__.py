"""The raw archive of valid events and dead letters, by event-time hour.

May import: ``pipelines.events``, ``pipelines.segments``, ``pipelines.storage``.
"""

from pipelines.archive.writer import (
    ARCHIVE_SCHEMA,
    DEAD_LETTER_SCHEMA,
    ArchiveBuffer,
    discard_uncommitted,
)

__all__ = [
    "ARCHIVE_SCHEMA",
    "DEAD_LETTER_SCHEMA",
    "ArchiveBuffer",
    "discard_uncommitted",
]
