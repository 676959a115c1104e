"""Reconcile each view's realtime values with its correction, hour by hour, and say why they
differ: windowed views in :mod:`.windows`, session views in :mod:`.sessions` (each kind's
reconciler in :mod:`.kinds`), both judged metric by metric by :mod:`.metrics`.

No Dagster imports; the blocking asset checks and the report use :func:`reconcile`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipelines.segments import HOUR_MS, read_range_records
from pipelines.serving import corrected_segments
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views.model import View
from quality.causes import ArchiveReader, archive_columns, id_column, read_hour_archive
from quality.compare import Tolerance
from quality.reconcile.kinds import HourReads, reconciler_of
from quality.reconcile.reads import corrected_by_hour
from quality.reconcile.results import MetricReconciliation, Reconciliation, TablesRead
from quality.reconcile.sessions import SessionCauses, reconcile_session_hour, settled_frontier
from quality.reconcile.windows import reconcile_hour

__all__ = [
    "MetricReconciliation",
    "Reconciliation",
    "SessionCauses",
    "TablesRead",
    "reconcile",
    "reconcile_hour",
    "reconcile_session_hour",
    "settled_frontier",
]


def reconcile(
    store: ObjectStore,
    views: Sequence[View],
    hours: Sequence[int],
    tolerance: Tolerance | None = None,
    on_result: Callable[[Reconciliation], None] | None = None,
    on_tables: TablesRead | None = None,
    archive_views: Sequence[View] | None = None,
    *,
    tables: Tables,
) -> list[Reconciliation]:
    """Reconcile every enabled view for every hour; the archive is read once per topic-hour.

    ``on_tables(view, hour, corrected, realtime)`` sees the two sides read for each corrected
    hour (the report draws its series from them instead of reading the day again).
    ``archive_views``: the views whose columns the archive is read for (default ``views``):
    a caller reconciling one view at a time names them all, so that its passes read the
    same columns and each hour is read once in the process (:func:`read_hour_archive`).
    ``tables``: the views' tables, where the corrections are read."""
    tolerance = tolerance or Tolerance.from_env()
    enabled = [v for v in views if not v.disabled]
    results = []
    by_topic: dict[str, list[View]] = {}
    for view in enabled:
        by_topic.setdefault(view.topic, []).append(view)
    ranges = {topic: read_range_records(store, topic) for topic in by_topic}
    columns = {  # the same columns for every hour, and for every pass of archive_views
        topic: archive_columns([v for v in archive_views or topic_views if v.topic == topic])
        for topic, topic_views in by_topic.items()
    }
    ids = {topic: id_column(topic_views) for topic, topic_views in by_topic.items()}
    reader = ArchiveReader(store)
    corrected = {  # one scan of each view's table for the pass, not two per hour
        view.name: set(
            corrected_segments(tables, view, sorted({view.segment_start(h) for h in hours}))
        )
        for view in enabled
    }
    corrected_rows = {  # one read of each run of hours, not one per hour
        view.name: corrected_by_hour(
            store, tables, view, [h for h in hours if view.segment_start(h) in corrected[view.name]]
        )
        for view in enabled
    }
    prepared = {  # what each view's reconciler keeps for the pass (the correction's sketches)
        view.name: reconciler_of(view).prepare(store, tables, view, hours) for view in enabled
    }
    for hour in hours:
        for topic, topic_views in by_topic.items():
            archive = read_hour_archive(
                reader, topic, hour, columns[topic], ranges[topic], ids[topic]
            )
            following = None
            if any(v.is_sliding for v in topic_views):  # their windows reach the next hour
                following = read_hour_archive(
                    reader, topic, hour + HOUR_MS, columns[topic], ranges[topic], ids[topic]
                )
            for view in topic_views:
                reads = HourReads(
                    reader,
                    ranges[topic],
                    archive,
                    following,
                    has_correction=view.segment_start(hour) in corrected[view.name],
                    corrected=corrected_rows[view.name].get(hour),
                    on_tables=on_tables,
                    tables=tables,
                )
                result = reconciler_of(view).reconcile_hour(
                    store, view, hour, tolerance, reads, prepared[view.name]
                )
                results.append(result)
                if on_result is not None:
                    on_result(result)
    results.sort(key=lambda r: ([v.name for v in enabled].index(r.view), r.hour_ms))
    return results
