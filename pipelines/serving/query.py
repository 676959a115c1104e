"""Serve a view, whatever its kind: each kind's read (:data:`READS`, by the kind's name).

A view's table holds batch rows of corrected hours and the realtime rows the publisher
committed (:mod:`.publisher`); windowed views are read by :mod:`.windows` (and rolled up by
:mod:`.rollup`), session views by :mod:`.sessions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import pyarrow as pa

from pipelines.exceptions import QueryError
from pipelines.serving.rollup import rollup_view
from pipelines.serving.sessions import ACTIVE, STARTED, query_sessions, realtime_sessions_table
from pipelines.serving.windows import query_windows, realtime_windows_table
from pipelines.storage import ObjectStore
from pipelines.tables import AsOf, Tables
from pipelines.views.model import SESSION, WINDOW, View

__all__ = ["READS", "KindRead", "query_view", "realtime_table"]


class KindRead(Protocol):
    def query(
        self,
        store: ObjectStore,
        view: View,
        start_ms: int,
        end_ms: int,
        prefer: str,
        *,
        tables: Tables,
        as_of: AsOf | None,
        active: bool,
        granularity_ms: int | None,
    ) -> pa.Table:
        """The view's rows starting in ``[start_ms, end_ms)`` (``active``: the rows open in
        it, where the kind has such rows; ``granularity_ms``: rolled up to it, where the
        kind's rows roll up)."""

    def realtime_table(
        self, view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
    ) -> pa.Table:
        """The final rows of the view's realtime files (per segment, its files), as
        ``schema`` (times in epoch ms)."""


class WindowRead:
    def query(
        self,
        store: ObjectStore,
        view: View,
        start_ms: int,
        end_ms: int,
        prefer: str,
        *,
        tables: Tables,
        as_of: AsOf | None,
        active: bool,
        granularity_ms: int | None,
    ) -> pa.Table:
        if active:
            raise QueryError(f"--active is for session views; {view.name} is a windowed view")
        if granularity_ms:
            return rollup_view(store, view, start_ms, end_ms, granularity_ms, tables=tables)
        return query_windows(store, view, start_ms, end_ms, prefer, tables=tables, as_of=as_of)

    def realtime_table(
        self, view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
    ) -> pa.Table:
        return realtime_windows_table(view, segments, schema)


class SessionRead:
    def query(
        self,
        store: ObjectStore,
        view: View,
        start_ms: int,
        end_ms: int,
        prefer: str,
        *,
        tables: Tables,
        as_of: AsOf | None,
        active: bool,
        granularity_ms: int | None,
    ) -> pa.Table:
        # Sessions do not roll up (ViewKind.check_rollup): a granularity leaves them as they are.
        match = ACTIVE if active else STARTED
        return query_sessions(
            store, view, start_ms, end_ms, prefer, tables=tables, match=match, as_of=as_of
        )

    def realtime_table(
        self, view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
    ) -> pa.Table:
        # A column at a time: a day holds over a hundred thousand sessions.
        found = [realtime_sessions_table(view, files) for files in segments]
        return pa.concat_tables(found).cast(schema) if found else schema.empty_table()


READS: dict[str, KindRead] = {WINDOW: WindowRead(), SESSION: SessionRead()}
"""Every kind's serving read, by the kind's name (:data:`pipelines.kinds.KINDS`)."""


def query_view(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    prefer: str = "newest",
    *,
    tables: Tables,
    as_of: AsOf | None = None,
    active: bool = False,
    granularity_ms: int | None = None,
) -> pa.Table:
    """The view's rows starting in ``[start_ms, end_ms)`` as its kind reads them: windows
    sorted by window and group (:func:`~pipelines.serving.windows.query_windows`), or
    sessions (:func:`~pipelines.serving.sessions.query_sessions`).

    ``prefer="realtime"`` ignores corrections (to compare), ``"batch"`` serves only them;
    ``as_of`` reads an earlier snapshot of the view's table.
    """
    return READS[view.kind].query(
        store,
        view,
        start_ms,
        end_ms,
        prefer,
        tables=tables,
        as_of=as_of,
        active=active,
        granularity_ms=granularity_ms,
    )


def realtime_table(
    view: View, segments: Iterable[Sequence[pa.Table]], schema: pa.Schema
) -> pa.Table:
    """The final rows of the view's realtime files (per segment, its files), as ``schema``."""
    return READS[view.kind].realtime_table(view, segments, schema)
