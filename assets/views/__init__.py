"""The ``views`` group: per view, ``realtime_<view>`` and ``corrected_<view>``.

The views are those in force when the code location loads, resolved as the workers and
``sluice query`` resolve them (:mod:`pipelines.views.resolve`: the views file
``SLUICE_VIEWS_FILE``, default ``data/views.yaml``, and the deployments recorded in the control
store, the newest change winning), so a correction computes the definition the stream runs.
Reload the location in the UI after editing the file or deploying elsewhere.

May import: ``assets`` helpers, ``orchestration.resources``, ``quality``, ``pipelines``.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.exc import SQLAlchemyError

from assets.views.factory import build_view_assets
from pipelines.config import get_settings
from pipelines.control import ControlStore
from pipelines.views import View
from pipelines.views.resolve import DEPLOYMENT, resolve_views_file

__all__ = [
    "VIEWS",
    "corrected_assets",
    "load_definitions",
    "realtime_assets",
    "views_in_force",
]

log = logging.getLogger(__name__)


def load_definitions(path: str | Path) -> dict[str, dict[str, Any]]:
    """The raw YAML mapping of each view, keyed by name: what gets deployed to the fleet."""
    document = yaml.safe_load(Path(path).read_text()) or {}
    entries = document.get("views", []) if isinstance(document, dict) else document
    return {entry["name"]: dict(entry) for entry in entries}


def _deployments(url: str) -> list[dict[str, Any]]:
    """The control store's deployment records; none when it does not exist yet or cannot be
    read (the file alone then decides, with a warning)."""
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []
    try:
        control = ControlStore(url)
        try:
            return control.deployed_views()
        finally:
            control.close()
    except SQLAlchemyError as exc:
        log.warning("views: control store unreadable (%s); using the views file alone", exc)
        return []


def views_in_force(
    path: str | Path, deployments: list[dict[str, Any]]
) -> tuple[list[View], dict[str, dict[str, Any]]]:
    """The resolved views (``disabled`` where their newest change disabled them) and the
    definition each would deploy."""
    resolved = resolve_views_file(path, deployments)
    deployed = {d["name"]: d["definition"] for d in deployments}
    from_file = load_definitions(path)
    views = [dataclasses.replace(r.view, disabled=not r.runs) for r in resolved.values()]
    definitions = {
        name: deployed[name] if r.source == DEPLOYMENT else from_file[name]
        for name, r in resolved.items()
    }
    return views, definitions


_SETTINGS = get_settings()
VIEWS, _DEFINITIONS = views_in_force(
    _SETTINGS.views_file, _deployments(_SETTINGS.resolved_control_store_url)
)
"""The views of this code location, validated and resolved."""

realtime_assets, corrected_assets = build_view_assets(VIEWS, _DEFINITIONS)
