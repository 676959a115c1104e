"""The kinds of view: what a view's ``kind:`` selects (:class:`~pipelines.kinds.base.ViewKind`).

Every module that treats views of different kinds differently asks the view's kind object,
never which kind it holds. A new kind is one module here and one entry in :data:`KINDS`
(plus its reconciliation in :mod:`quality.reconcile.kinds`).

May import: ``pipelines.views``, ``pipelines.segments``, ``pipelines.exceptions``; each kind
imports its stream state, correction and serving read (``pipelines.stream``,
``pipelines.batch``, ``pipelines.serving``) only when asked, since those ask it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.kinds.base import CorrectionRun, ViewKind
from pipelines.kinds.session import SESSIONS
from pipelines.kinds.windowed import WINDOWED
from pipelines.views.model import View

__all__ = ["KINDS", "CorrectionRun", "ViewKind", "by_kind", "kind_of"]

KINDS: dict[str, ViewKind] = {kind.name: kind for kind in (WINDOWED, SESSIONS)}
"""Every kind, by its ``kind:`` name, in the order a correction runs them (the windowed
pass counts the archive's events for the session pass)."""


def kind_of(view: View) -> ViewKind:
    return KINDS[view.kind]


def by_kind(views: Iterable[View]) -> dict[ViewKind, list[View]]:
    """``views`` per kind, every kind present (possibly with none), in :data:`KINDS` order."""
    grouped: dict[ViewKind, list[View]] = {kind: [] for kind in KINDS.values()}
    for view in views:
        grouped[kind_of(view)].append(view)
    return grouped
