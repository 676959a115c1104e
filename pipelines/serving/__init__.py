"""The serving query over realtime and corrected segments.

May import: ``pipelines.views``, ``pipelines.segments``, ``pipelines.storage``, ``pipelines.stream`` (state columns).
"""

from pipelines.serving.query import (
    SOURCE,
    SegmentSource,
    merge_realtime,
    query_view,
    read_published,
)
from pipelines.serving.sessions import ACTIVE, STARTED, merge_realtime_sessions, query_sessions

__all__ = [
    "ACTIVE",
    "SOURCE",
    "STARTED",
    "SegmentSource",
    "merge_realtime",
    "merge_realtime_sessions",
    "query_sessions",
    "query_view",
    "read_published",
]
