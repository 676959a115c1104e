"""When Dagster materializes the corrections and the report by itself (declarative automation).

Both follow event time, not the wall clock. A partition is due when it was never materialized
(a state, seen on any tick) or when something upstream changed since it was (a backfill that
re-corrects an hour re-reports its day), once every upstream partition exists and none is in
flight. Dagster's ``eager`` uses "newly missing" instead of "missing": it depends on which
upstream events a tick saw, and the archive-hours sensor records a day's hours one event at a
time, so a day's first hour could go unrequested and the day unreported. A partition whose last run failed waits for a person (the UI shows it, a
backfill retries it) instead of failing again on every tick. Replayed hours lie years in the
past, so nothing is limited to the latest time window.

An hour of ``corrected_<view>`` runs once its ``raw_archive`` hour is recorded complete (the
``archive_hours_complete`` sensor does that when the fleet's watermark passes it); a day's
``reconciliation_report`` runs once every hour of the day is corrected and each correction's
blocking checks passed.
"""

from __future__ import annotations

import dagster as dg

__all__ = ["CORRECT_WHEN_ARCHIVED", "REPORT_WHEN_CORRECTED"]

_DUE = (
    (
        dg.AutomationCondition.missing()
        | dg.AutomationCondition.any_deps_updated().since_last_handled()
    )
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
    & ~dg.AutomationCondition.execution_failed()
)

CORRECT_WHEN_ARCHIVED = _DUE.with_label("correct when its archive hour is complete")

REPORT_WHEN_CORRECTED = (
    _DUE & dg.AutomationCondition.all_deps_blocking_checks_passed()
).with_label("report when every hour of the day is corrected and checked")
