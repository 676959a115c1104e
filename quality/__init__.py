"""Data quality as a library: schemas, nothing-lost lineage, expectation suites, realtime vs
corrected reconciliation with its causes, and the daily report.

A Spark job, a script or a test calls it without a Dagster context; the asset checks that
wrap it sit beside the assets they check in ``assets/``.

May import: ``pipelines`` only (no Dagster, no ``assets``, no ``orchestration``; import-linter
contracts in ``pyproject.toml``).
"""
