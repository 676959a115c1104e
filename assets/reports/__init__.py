"""The ``reports`` group: the daily ``reconciliation_report`` over the code location's views.

May import: ``assets`` helpers, ``orchestration.resources``, ``quality``, ``pipelines``.
"""

from assets.reports.reconciliation import DAILY, build_reconciliation_report
from assets.views import VIEWS

__all__ = ["DAILY", "reconciliation_report"]

reconciliation_report = build_reconciliation_report(VIEWS)
