"""Asset checks that run each corrected view's great-expectations suite on the run's hours.

One check per enabled view on ``corrected_<view>``, named ``expectations_pass``. It is not
blocking: a broken expectation says the published values look wrong, but they are already
published and stopping downstream would not unpublish them. Its severity says how wrong:
ERROR when an expectation no correct segment can break fails (a missing window, a negative
count, distinct > count, quantiles or bounds out of order), WARN when only the row-count bound
learned from history does (traffic may really have moved). The suite's results are the metadata.
"""

import logging
from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.constants import corrected_key
from assets.run_window import not_partitioned, run_window_ms
from orchestration.resources import StorageResource
from pipelines.kinds import kind_of
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views import View
from quality.expectations import ExpectationSettings, SuiteResult, validate_view

__all__ = [
    "EXPECTATIONS_CHECK",
    "build_expectation_check",
    "build_expectation_checks",
    "evaluate_expectations",
    "expectation_metadata",
]

log = logging.getLogger(__name__)

EXPECTATIONS_CHECK = "expectations_pass"


def expectation_metadata(result: SuiteResult) -> dict[str, Any]:
    """Dagster metadata of a suite run: counts, every expectation's verdict, the row bound."""
    summary = result.summary()
    failed = result.failed
    return {
        "segments": summary["segments"],
        "rows": result.rows,
        "expectations": len(result.outcomes),
        "expectations_failed": len(failed),
        "failed_errors": len(result.hard_failures),
        "failed_warnings": len(failed) - len(result.hard_failures),
        "failed": dg.MetadataValue.json(summary["failed"]),
        "failed_columns": dg.MetadataValue.json(sorted({c for o in failed for c in o.columns})),
        "results": dg.MetadataValue.json(summary["results"]),
        "row_bounds": dg.MetadataValue.json(summary["row_bounds"]),
        "notes": dg.MetadataValue.json(result.notes),
        "validation_seconds": dg.MetadataValue.float(round(result.seconds, 3)),
    }


def evaluate_expectations(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    settings: ExpectationSettings | None = None,
    *,
    tables: Tables,
) -> dg.AssetCheckResult:
    """Validate the corrected values of ``view`` for the segments covering ``[start_ms, end_ms)``."""
    result = validate_view(store, view, start_ms, end_ms, settings, tables=tables)
    if result.success:
        description = f"all {len(result.outcomes)} expectations passed"
        if result.notes:
            description += f" ({'; '.join(result.notes)})"
    else:
        description = f"{len(result.failed)} of {len(result.outcomes)} failed: " + "; ".join(
            o.describe() for o in result.failed
        )
        log.warning("%s: %s", view.name, description)
    severity = dg.AssetCheckSeverity.ERROR if result.hard_failures else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(
        passed=result.success,
        severity=severity,
        metadata=expectation_metadata(result),
        description=description,
    )


def build_expectation_check(
    view: View, settings: ExpectationSettings | None = None
) -> dg.AssetChecksDefinition:
    """The (non-blocking) expectations check of ``corrected_<view>`` for its run's partitions."""

    @dg.asset_check(
        asset=corrected_key(view.name),
        name=EXPECTATIONS_CHECK,
        blocking=False,
        description=f"The corrected values of {view.name} meet its great-expectations suite: "
        "complete windows, metrics within their aggregations' ranges, distinct <= count, "
        "ordered quantiles and bounds, rows within the bound learned from earlier hours "
        "(a warning).",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, storage: StorageResource
    ) -> dg.AssetCheckResult:
        window = run_window_ms(context)
        if window is None:
            return not_partitioned("nothing to validate")
        with storage.open_tables() as tables:
            return evaluate_expectations(
                storage.open(), view, window[0], window[1], settings, tables=tables
            )

    return _check


def build_expectation_checks(
    views: Sequence[View], settings: ExpectationSettings | None = None
) -> list[dg.AssetChecksDefinition]:
    """One check per enabled view whose kind has value rules (session views have no suite
    yet: their sessions are reconciled instead); settings default to ``SLUICE_EXPECT_*`` (read
    at build time)."""
    settings = settings or ExpectationSettings.from_env()
    return [
        build_expectation_check(v, settings)
        for v in views
        if not v.disabled and kind_of(v).value_rules
    ]
