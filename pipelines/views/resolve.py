"""Which definition of a view is in force, and whether it runs: the newest change wins.

A view can be defined in two places: the views file (``SLUICE_VIEWS_FILE``) and a deployment
recorded in the control store (materializing ``realtime_<view>`` in Dagster, or a Disabled
state set there). Each is a change with a time: the file's is its modification time, a
deployment's the time it was recorded (a new definition, or entering or leaving Disabled).
For each view the newest change decides both the definition and whether it runs; a view
disabled by its newest change stays defined (it can still be queried and corrected) but no
worker runs it. Workers, query, the batch correction and the checks all resolve views here,
so they agree on every view's fingerprint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipelines.events.declaration import TopicDeclaration
from pipelines.views.loader import parse_views, read_views_document
from pipelines.views.model import View
from pipelines.views.topics import declarations_beside

__all__ = [
    "DEPLOYMENT",
    "ResolvedView",
    "file_definitions",
    "resolve_views",
    "resolve_views_file",
    "views_in_force",
]

DEPLOYMENT = "deployment"


@dataclass(frozen=True)
class ResolvedView:
    """A view's definition in force, with where and when it was last changed."""

    view: View
    state: str
    """``Disabled``, or the deployment's state (Waiting, Scheduled, Running), or ``Enabled``
    for a file view never deployed."""
    source: str
    """``file <path>`` or ``deployment``."""
    changed_at: float

    @property
    def runs(self) -> bool:
        return self.state != "Disabled"


def resolve_views(
    file_views: Iterable[View],
    file_changed_at: float,
    file_source: str,
    deployments: Iterable[Mapping[str, Any]],
    topics: Mapping[str, TopicDeclaration] | None = None,
) -> dict[str, ResolvedView]:
    """Every view by name, each from its newest change (ties go to the deployment). A deployed
    definition reads its topic with ``topics`` (the views file's declarations and the topics
    file's; default: the topics file's)."""
    resolved = {
        v.name: ResolvedView(
            v, "Disabled" if v.disabled else "Enabled", f"file {file_source}", file_changed_at
        )
        for v in file_views
    }
    for deployed in deployments:
        name = deployed["name"]
        changed_at = float(deployed["deployed_at"])
        current = resolved.get(name)
        if current is not None and current.changed_at > changed_at:
            continue
        (view,) = parse_views(
            [deployed["definition"]], source=f"deployed view {name}", topics=topics
        )
        resolved[name] = ResolvedView(view, deployed["state"], DEPLOYMENT, changed_at)
    return dict(sorted(resolved.items()))


def resolve_views_file(
    path: str | Path, deployments: Iterable[Mapping[str, Any]]
) -> dict[str, ResolvedView]:
    """:func:`resolve_views` of the views file at ``path`` (its mtime as its change time)."""
    path = Path(path)
    document = read_views_document(path)
    topics = declarations_beside(document, str(path))
    views = parse_views(document, source=str(path), topics=topics)
    return resolve_views(views, path.stat().st_mtime, str(path), deployments, topics)


def file_definitions(path: str | Path) -> dict[str, dict[str, Any]]:
    """The raw YAML mapping of each view of the views file, by name: what gets deployed."""
    document = yaml.safe_load(Path(path).read_text()) or {}
    entries = document.get("views", []) if isinstance(document, dict) else document
    return {entry["name"]: dict(entry) for entry in entries}


def views_in_force(
    path: str | Path, deployments: Iterable[Mapping[str, Any]]
) -> tuple[list[View], dict[str, dict[str, Any]]]:
    """Every view resolved (``disabled`` where its newest change disabled it) and the
    definition each would deploy: what the Dagster code location builds its assets from."""
    deployments = list(deployments)
    resolved = resolve_views_file(path, deployments)
    deployed = {d["name"]: d["definition"] for d in deployments}
    from_file = file_definitions(path)
    views = [dataclasses.replace(r.view, disabled=not r.runs) for r in resolved.values()]
    definitions = {
        name: deployed[name] if r.source == DEPLOYMENT else from_file[name]
        for name, r in resolved.items()
    }
    return views, definitions
