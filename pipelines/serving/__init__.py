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

__all__ = ["SOURCE", "SegmentSource", "merge_realtime", "query_view", "read_published"]
