"""The ``reports`` group: the daily ``reconciliation_report`` over the code location's views,
built by :func:`build_reconciliation_report` when the location loads.

May import: ``assets`` helpers, ``orchestration.resources``, ``quality``, ``pipelines``.
"""

from assets.reports.reconciliation import DAILY, build_reconciliation_report

__all__ = ["DAILY", "build_reconciliation_report"]
