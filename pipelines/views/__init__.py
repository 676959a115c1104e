"""View definitions: the model and the validating YAML loader."""

from pipelines.views.loader import load_views, parse_duration, parse_views
from pipelines.views.model import HOUR_MS, WINDOW_END, WINDOW_START, View, format_duration

__all__ = [
    "HOUR_MS",
    "WINDOW_END",
    "WINDOW_START",
    "View",
    "format_duration",
    "load_views",
    "parse_duration",
    "parse_views",
]
