"""How each kind of view is reconciled, by the kind's name (:data:`RECONCILERS`): the pass in
:func:`quality.reconcile.reconcile` reads each topic-hour once and hands every view's reconciler
what it read, never asking which kind the view is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from pipelines.segments import RangeRecord
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import SESSION, WINDOW, View
from quality.causes import ArchiveReader, HourArchive
from quality.compare import Tolerance
from quality.reconcile.results import Reconciliation, TablesRead
from quality.reconcile.sessions import reconcile_session_hour
from quality.reconcile.windows import CorrectedStates, reconcile_hour

__all__ = ["RECONCILERS", "HourReads", "KindReconciler", "reconciler_of"]


@dataclass(frozen=True)
class HourReads:
    """What a reconciliation pass read for one view and hour."""

    reader: ArchiveReader
    ranges: Sequence[RangeRecord]
    archive: HourArchive
    """The topic's archive of the hour."""
    following: HourArchive | None
    """The next hour's archive, read when a view of the topic has windows reaching it."""
    has_correction: bool
    corrected: pa.Table | None
    on_tables: TablesRead | None
    tables: Tables
    """The views' tables, where the corrected rows and sketches are read."""


class KindReconciler(Protocol):
    def prepare(
        self, store: ObjectStore, tables: Tables, view: View, hours: Sequence[int]
    ) -> object:
        """What the pass keeps of ``view`` for all its hours (read when first needed)."""

    def reconcile_hour(
        self,
        store: ObjectStore,
        view: View,
        hour: int,
        tolerance: Tolerance,
        reads: HourReads,
        prepared: object,
    ) -> Reconciliation:
        """Reconcile the view's rows starting in ``hour``."""


class WindowReconciler:
    """Windows against the archive, judged against the correction's sketches."""

    def prepare(
        self, store: ObjectStore, tables: Tables, view: View, hours: Sequence[int]
    ) -> CorrectedStates:
        return CorrectedStates(store, tables, view, hours)

    def reconcile_hour(
        self,
        store: ObjectStore,
        view: View,
        hour: int,
        tolerance: Tolerance,
        reads: HourReads,
        prepared: object,
    ) -> Reconciliation:
        assert isinstance(prepared, CorrectedStates)
        return reconcile_hour(
            store,
            view,
            hour,
            tolerance,
            reads.archive,
            reads.following,
            has_correction=reads.has_correction,
            on_tables=reads.on_tables,
            corrected=reads.corrected,
            states=prepared,
            tables=reads.tables,
        )


class SessionReconciler:
    """Sessions started in the hour, with the causes of every hour they span."""

    def prepare(self, store: ObjectStore, tables: Tables, view: View, hours: Sequence[int]) -> None:
        return None

    def reconcile_hour(
        self,
        store: ObjectStore,
        view: View,
        hour: int,
        tolerance: Tolerance,
        reads: HourReads,
        prepared: object,
    ) -> Reconciliation:
        return reconcile_session_hour(
            store,
            view,
            hour,
            tolerance,
            reads.reader,
            reads.ranges,
            has_correction=reads.has_correction,
            on_tables=reads.on_tables,
            corrected=reads.corrected,
            tables=reads.tables,
        )


RECONCILERS: dict[str, KindReconciler] = {
    WINDOW: WindowReconciler(),
    SESSION: SessionReconciler(),
}
"""Every kind's reconciler, by the kind's name (:data:`pipelines.kinds.KINDS`)."""


def reconciler_of(view: View) -> KindReconciler:
    return RECONCILERS[view.kind]
