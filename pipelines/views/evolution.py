"""Which changes of a topic's declaration the fleet follows, and which it refuses.

A declaration may gain columns, nullable or required (the archive's hours from before read
them as null), and may drop a column no deployed view uses (older files keep it; reads ignore
it). It may not change a declared column's type: the archive keeps every hour with the type it
was written with and the correction reads them all with one. It may not drop a column a
deployed view still uses. Deploying a view (``realtime_<view>`` in Dagster) and an agent's
reload of the views in force both refuse such a change and keep what was in force.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pipelines.archive.archived import archived_types
from pipelines.events.declaration import ColumnType, TopicDeclaration
from pipelines.exceptions import DeclarationChangeRefused, ViewDefinitionError
from pipelines.storage import ObjectStore
from pipelines.views.loader import parse_views
from pipelines.views.model import View

__all__ = [
    "ARCHIVED",
    "check_against",
    "check_deployments",
    "check_types",
    "declared_types",
    "type_changes",
]

ARCHIVED = "the archive's newest hour"
"""Where :func:`check_against` found the types a declaration is compared with."""


def declared_types(views: Iterable[View]) -> dict[str, dict[str, ColumnType]]:
    """The declared columns' types of each topic the views read (views without one left out)."""
    return {v.topic: v.declaration.columns() for v in views if v.declaration is not None}


def type_changes(
    topic: str, before: Mapping[str, ColumnType], after: Mapping[str, ColumnType], where: str
) -> list[str]:
    """Each column of ``after`` whose type differs from ``before`` (found in ``where``), said."""
    return [
        f"topic {topic!r}: column {name!r} is {before[name]} in {where}, declared {kind} now"
        for name, kind in after.items()
        if name in before and before[name] != kind
    ]


def check_types(
    before: Mapping[str, Mapping[str, ColumnType]],
    after: Mapping[str, Mapping[str, ColumnType]],
    where: str,
) -> None:
    """Refuse a change of any declared column's type between ``before`` and ``after`` (both
    by topic)."""
    changed = [
        line
        for topic, columns in after.items()
        if topic in before
        for line in type_changes(topic, before[topic], columns, where)
    ]
    if changed:
        raise DeclarationChangeRefused(
            "declaration change refused: a declared column's type cannot change (the archive "
            "holds its hours with the old type); declare the new values under a new column "
            "name:\n  " + "\n  ".join(changed)
        )


def check_deployments(
    deployments: Iterable[Mapping[str, Any]], topics: Mapping[str, TopicDeclaration]
) -> None:
    """Refuse ``topics``' declarations if a deployed definition of one of their topics does
    not read with them (it uses a column they no longer declare, or declare otherwise)."""
    broken = []
    for deployed in deployments:
        definition = deployed["definition"]
        if definition.get("topic") not in topics:
            continue
        try:
            parse_views([definition], source=f"deployed view {deployed['name']}", topics=topics)
        except ViewDefinitionError as exc:
            broken.append(str(exc))
    if broken:
        raise DeclarationChangeRefused(
            "declaration change refused: deployed views no longer read with it (a column they "
            "use was removed or changed); redeploy or disable them first:\n  " + "\n  ".join(broken)
        )


def check_against(
    views: Iterable[View], deployments: Iterable[Mapping[str, Any]], store: ObjectStore
) -> None:
    """Refuse ``views`` if their topics' declarations change a column's type from the one of
    the topic's newest archived hour in ``store``, or no longer read a deployed view of those
    topics (deployments of the views' own names left out: ``views`` replace them)."""
    views = list(views)
    declarations = {v.topic: v.declaration for v in views if v.declaration is not None}
    for topic, declaration in declarations.items():
        archived = archived_types(store, topic)
        if archived is not None:
            check_types({topic: archived}, {topic: declaration.columns()}, ARCHIVED)
    names = {v.name for v in views}
    check_deployments([d for d in deployments if d["name"] not in names], declarations)
