"""When Dagster materializes the corrections and the report by itself (declarative automation).

Both follow event time, not the wall clock: Dagster's ``eager`` condition without its
"latest time window only" clause, because replayed hours lie years in the past. An hour of
``corrected_<view>`` runs once its ``raw_archive`` hour is recorded complete (the
``archive_hours_complete`` sensor does that when the fleet's watermark passes it); a day's
``reconciliation_report`` runs once every hour of the day is corrected and each correction's
blocking check passed.
"""

from __future__ import annotations

import dagster as dg

__all__ = ["CORRECT_WHEN_ARCHIVED", "REPORT_WHEN_CORRECTED"]

_ANY_TIME_EAGER = dg.AutomationCondition.eager().without(
    dg.AutomationCondition.in_latest_time_window()
)

CORRECT_WHEN_ARCHIVED = _ANY_TIME_EAGER.with_label("correct when its archive hour is complete")

REPORT_WHEN_CORRECTED = (
    _ANY_TIME_EAGER & dg.AutomationCondition.all_deps_blocking_checks_passed()
).with_label("report when every hour of the day is corrected and checked")
