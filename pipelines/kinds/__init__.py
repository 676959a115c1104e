"""The kinds of view: what a view's ``kind:`` selects (:class:`~pipelines.kinds.base.ViewKind`).

Every module that treats views of different kinds differently asks the view's kind object,
or looks up its own layer's implementation by the kind's name; none asks which kind it holds.
A new kind is one module here and one entry in :data:`KINDS`, plus its implementation in each
layer that behaves differently for it, registered by the kind's name: its stream state
(:data:`pipelines.stream.view_state.STATES`), its correction
(:data:`pipelines.batch.correct.CORRECTIONS`), its serving read
(:data:`pipelines.serving.query.READS`) and its reconciliation
(:data:`quality.reconcile.kinds.RECONCILERS`). A test checks every kind has all four.

May import: ``pipelines.views``, ``pipelines.segments``, ``pipelines.exceptions`` (it sits
below every layer that asks it).
"""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.kinds.base import ViewKind
from pipelines.kinds.session import SESSIONS
from pipelines.kinds.windowed import WINDOWED
from pipelines.views.model import View

__all__ = ["KINDS", "ViewKind", "by_kind", "kind_of"]

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
