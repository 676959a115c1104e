"""View definitions: the model, the validating YAML loader, and which definition is in force.

``definitions`` holds the pydantic models of a views file (a union on ``kind``), ``fields``
their value types, ``problems`` the wording and paths of their errors, ``loader`` reads YAML
through them, ``topics`` gives each view its topic's declaration, and ``schema`` prints their
JSON Schema for editors.

May import: ``pipelines.aggregators``, ``pipelines.events``, ``pipelines.segments``.
"""

from pipelines.views.loader import (
    check_views,
    load_views,
    parse_duration,
    parse_views,
    read_views_document,
)
from pipelines.views.model import (
    SESSION_COLUMNS,
    WINDOW_END,
    WINDOW_START,
    SessionSpec,
    View,
    format_duration,
)
from pipelines.views.problems import Problem
from pipelines.views.resolve import (
    ResolvedView,
    resolve_views,
    resolve_views_file,
    views_in_force,
)
from pipelines.views.schema import views_json_schema
from pipelines.views.topics import declaration_for, load_declarations

__all__ = [
    "SESSION_COLUMNS",
    "WINDOW_END",
    "WINDOW_START",
    "Problem",
    "ResolvedView",
    "SessionSpec",
    "View",
    "check_views",
    "declaration_for",
    "format_duration",
    "load_declarations",
    "load_views",
    "parse_duration",
    "parse_views",
    "read_views_document",
    "resolve_views",
    "resolve_views_file",
    "views_in_force",
    "views_json_schema",
]
