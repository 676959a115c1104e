"""The ``raw`` group: the ``events`` topic (external) and the hourly raw archive.

May import: ``assets`` helpers, ``orchestration.resources``, ``quality``, ``pipelines``.
"""

from assets.raw.archive import raw_archive
from assets.raw.events import events

__all__ = ["events", "raw_archive"]
