"""The ``views`` group: per view in the views file, ``realtime_<view>`` and ``corrected_<view>``.

The views file is ``SLUICE_VIEWS_FILE`` (default ``data/views.yaml``), read when the code
location loads; reload the location in the UI after editing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from assets.views.factory import build_view_assets
from pipelines.config import get_settings
from pipelines.views import View, load_views

__all__ = ["VIEWS", "corrected_assets", "load_definitions", "realtime_assets"]


def load_definitions(path: str | Path) -> dict[str, dict[str, Any]]:
    """The raw YAML mapping of each view, keyed by name: what gets deployed to the fleet."""
    document = yaml.safe_load(Path(path).read_text()) or {}
    entries = document.get("views", []) if isinstance(document, dict) else document
    return {entry["name"]: dict(entry) for entry in entries}


_VIEWS_FILE = get_settings().views_file
VIEWS: list[View] = load_views(_VIEWS_FILE)
"""The views of this code location, validated."""

realtime_assets, corrected_assets = build_view_assets(VIEWS, load_definitions(_VIEWS_FILE))
