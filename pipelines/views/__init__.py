"""View definitions: the model, the validating YAML loader, and which definition is in force.

May import: ``pipelines.aggregators``, ``pipelines.events``, ``pipelines.segments``.
"""

from pipelines.views.loader import load_views, parse_duration, parse_views
from pipelines.views.model import (
    SESSION_COLUMNS,
    WINDOW_END,
    WINDOW_START,
    SessionSpec,
    View,
    format_duration,
)
from pipelines.views.resolve import (
    ResolvedView,
    resolve_views,
    resolve_views_file,
    views_in_force,
)

__all__ = [
    "SESSION_COLUMNS",
    "WINDOW_END",
    "WINDOW_START",
    "ResolvedView",
    "SessionSpec",
    "View",
    "format_duration",
    "load_views",
    "parse_duration",
    "parse_views",
    "resolve_views",
    "resolve_views_file",
    "views_in_force",
]
