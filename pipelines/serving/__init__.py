"""The serving query over realtime and corrected segments.

May import: ``pipelines.views``, ``pipelines.segments``, ``pipelines.storage``,
``pipelines.tables``, ``pipelines.kinds``.
"""

from pipelines.serving.query import query_view
from pipelines.serving.rollup import rollup_view, window_states
from pipelines.serving.sessions import ACTIVE, STARTED, merge_realtime_sessions, query_sessions
from pipelines.serving.sources import SOURCE, SegmentSource, corrected_segments, segment_sources
from pipelines.serving.windows import merge_realtime

__all__ = [
    "ACTIVE",
    "SOURCE",
    "STARTED",
    "SegmentSource",
    "corrected_segments",
    "merge_realtime",
    "merge_realtime_sessions",
    "query_sessions",
    "query_view",
    "rollup_view",
    "segment_sources",
    "window_states",
]
