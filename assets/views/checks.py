"""Asset checks built from specs: does a correction agree with what the stream served?

One blocking check per corrected view. For the hours the run just materialized it compares
the corrected values (``prefer="batch"``) with the realtime ones (``prefer="realtime"``) and
reconciles each hour (:mod:`quality.reconcile`): differences that late or duplicate events
(or sketch error) do not explain fail the check with ERROR severity, which, the check being
blocking, stops anything downstream of the correction in the same run. Explained differences
beyond the accuracy target (``Tolerance.relative``) fail it with WARN: the stream was off for
known reasons, downstream may go on. Errors, causes and failures become metadata.
:func:`evaluate_correction` is the check's body, callable without Dagster's machinery.
"""

import logging
import typing
from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.constants import corrected_key
from assets.partitions import HOURLY, partition_key_for
from assets.run_window import not_partitioned, run_hours
from orchestration.resources import StorageResource
from pipelines.segments import HOUR_MS, hour_label
from pipelines.serving.query import query_view
from pipelines.storage import ObjectStore
from pipelines.tables import Tables
from pipelines.views import View
from quality.causes import Causes
from quality.compare import Comparison, Tolerance, compare_tables, metric_kinds, view_keys
from quality.reconcile import Reconciliation, reconcile

__all__ = [
    "CORRECTION_CHECK",
    "build_correction_checks",
    "comparison_metadata",
    "evaluate_correction",
    "hour_evaluation",
    "hourly_results",
    "reconciliation_metadata",
    "summarize_hours",
]

log = logging.getLogger(__name__)

CORRECTION_CHECK = "realtime_within_tolerance"


def _number(value: float | None) -> float:
    return float("nan") if value is None else round(float(value), 6)


def comparison_metadata(comparison: Comparison) -> dict[str, Any]:
    """Dagster metadata of a comparison: counts, per-metric errors, and why it failed."""
    metadata: dict[str, Any] = {
        "corrected_rows": comparison.expected_rows,
        "realtime_rows": comparison.actual_rows,
        "matched_rows": comparison.matched,
        "groups_missing": len(comparison.missing),
        "groups_extra": len(comparison.extra),
        "group_mismatch": dg.MetadataValue.float(comparison.group_mismatch),
        "tolerance_relative": comparison.tolerance.relative,
        "tolerance_approximate": comparison.tolerance.approximate_relative,
        "tolerance_statistic": comparison.tolerance.statistic,
        "failures": dg.MetadataValue.json(comparison.failures),
        "errors": dg.MetadataValue.json(comparison.summary()["metrics"]),
    }
    if comparison.missing:
        metadata["missing_sample"] = dg.MetadataValue.json(
            [list(map(str, k)) for k in comparison.missing[:10]]
        )
    if comparison.extra:
        metadata["extra_sample"] = dg.MetadataValue.json(
            [list(map(str, k)) for k in comparison.extra[:10]]
        )
    for metric in comparison.metrics:
        metadata[f"{metric.column}_rel_max"] = dg.MetadataValue.float(_number(metric.rel_max))
        metadata[f"{metric.column}_rel_mean"] = dg.MetadataValue.float(_number(metric.rel_mean))
        metadata[f"{metric.column}_abs_max"] = dg.MetadataValue.float(_number(metric.abs_max))
        metadata[f"{metric.column}_abs_mean"] = dg.MetadataValue.float(_number(metric.abs_mean))
    return metadata


def reconciliation_metadata(results: list[Reconciliation]) -> dict[str, Any]:
    """Dagster metadata of hourly reconciliations: causes, unexplained rows, failures."""
    causes = sum((r.causes for r in results), Causes())
    unexplained: dict[str, int] = {}
    for result in results:
        for metric in result.metrics:
            unexplained[metric.column] = unexplained.get(metric.column, 0) + metric.unexplained
    return {
        "hours_reconciled": sum(r.corrected for r in results),
        "hours_unexplained": sum(not r.passed for r in results),
        "late_dropped": causes.late_dropped,
        "duplicates": causes.duplicates,
        "dead_letters": causes.dead_letters,
        "archived_events": causes.events,
        "groups_unexplained": sum(r.groups_unexplained for r in results),
        "unexplained_rows": dg.MetadataValue.json(unexplained),
        "unexplained": dg.MetadataValue.json([f for r in results for f in r.failures][:20]),
    }


def evaluate_correction(
    store: ObjectStore,
    view: View,
    start_ms: int,
    end_ms: int,
    tolerance: Tolerance | None = None,
    reconciled: Sequence[Reconciliation] | None = None,
    *,
    tables: Tables,
) -> dg.AssetCheckResult:
    """Compare corrected with realtime values of ``view`` for windows in ``[start_ms, end_ms)``;
    ``reconciled``: the view's reconciliations of those hours, if the caller has them."""
    tolerance = tolerance or Tolerance.from_env()
    hours = range(start_ms - start_ms % HOUR_MS, end_ms, HOUR_MS)
    if reconciled is None:
        reconciled = reconcile(store, [view], list(hours), tolerance, tables=tables)
    results = [r for r in reconciled if r.hour_ms in hours]
    comparison = _hour_comparison(results, start_ms, end_ms)
    if comparison is None:
        corrected = query_view(store, view, start_ms, end_ms, prefer="batch", tables=tables)
        realtime = query_view(store, view, start_ms, end_ms, prefer="realtime", tables=tables)
        keys, kinds = view_keys(view), metric_kinds(view)
        comparison = compare_tables(corrected, realtime, keys, kinds, tolerance)
    metadata = comparison_metadata(comparison)
    metadata["hours"] = f"{hour_label(start_ms)} .. {hour_label(end_ms - 1)}"
    metadata.update(reconciliation_metadata(results))
    unexplained = [f for r in results for f in r.failures]
    if unexplained:
        log.warning("%s: realtime differs from corrected unexplained: %s", view.name, unexplained)
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata=metadata,
            description="; ".join(unexplained[:5]),
        )
    if comparison.failures:
        causes = sum((r.causes for r in results), Causes())
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata=metadata,
            description="beyond the accuracy target, explained by "
            f"{causes.duplicates} duplicate(s) and {causes.late_dropped} late event(s): "
            + "; ".join(comparison.failures),
        )
    return dg.AssetCheckResult(
        passed=True,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description="realtime agrees with the correction",
    )


def _hour_comparison(
    results: Sequence[Reconciliation], start_ms: int, end_ms: int
) -> Comparison | None:
    """The comparison the hour's reconciliation made already (the same two queries of the
    same hour), when ``[start_ms, end_ms)`` is that one hour."""
    if end_ms - start_ms != HOUR_MS or start_ms % HOUR_MS or len(results) != 1:
        return None
    return results[0].comparison


def hourly_results(
    store: ObjectStore,
    view: View,
    hours: Sequence[int],
    tolerance: Tolerance,
    views: Sequence[View] = (),
    *,
    tables: Tables,
) -> list[tuple[str, dg.AssetCheckResult]]:
    """(partition key, result) of the check for each hour, each hour compared on its own.

    The hours are reconciled in one pass (range records read once, each archive file once:
    neighbouring hours share files), not one pass per hour; ``views``, every view checked in
    the process: the archive is read for all their columns, so the checks of the other
    views in the same run read no hour again."""
    reconciled = reconcile(
        store, [view], list(hours), tolerance, archive_views=[*views, view], tables=tables
    )
    return [
        (
            partition_key_for(hour),
            evaluate_correction(
                store, view, hour, hour + HOUR_MS, tolerance, reconciled, tables=tables
            ),
        )
        for hour in hours
    ]


def _target_class() -> Any:
    """The type of ``AssetCheckEvaluation.target_materialization_data``, read from the public
    class's annotations: Dagster 1.13 does not export it (and its private modules are off
    limits here, tests/test_public_apis.py)."""
    hint = typing.get_type_hints(dg.AssetCheckEvaluation)["target_materialization_data"]
    return next(t for t in typing.get_args(hint) if t is not type(None))


def hour_evaluation(
    instance: dg.DagsterInstance, key: dg.AssetKey, hour: str, result: dg.AssetCheckResult
) -> dg.AssetCheckEvaluation:
    """``result`` as the evaluation of the check for partition ``hour``, aimed at the hour's
    latest materialization as Dagster aims a returned result: without that target the
    evaluation counts for no materialization, and the report's automation (blocking checks
    passed) would wait for ever."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[hour]), limit=1
    ).records
    target = (
        _target_class()(
            run_id=records[0].event_log_entry.run_id,
            storage_id=records[0].storage_id,
            timestamp=records[0].timestamp,
        )
        if records
        else None
    )
    return dg.AssetCheckEvaluation(
        asset_key=key,
        check_name=CORRECTION_CHECK,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
        blocking=True,
        partition=hour,
        target_materialization_data=target,
    )


def summarize_hours(results: Sequence[tuple[str, dg.AssetCheckResult]]) -> dg.AssetCheckResult:
    """The run's result from its hours': passed if every hour passed; ERROR if any hour failed
    with ERROR (that gates what follows in the run), else WARN; the failed hours named."""
    failed = [(hour, r) for hour, r in results if not r.passed]
    errors = [hour for hour, r in failed if r.severity == dg.AssetCheckSeverity.ERROR]
    metadata = {
        "hours": len(results),
        "hours_failed": dg.MetadataValue.json([hour for hour, _ in failed]),
        "hours_in_error": dg.MetadataValue.json(errors),
        "hours_checked": f"{results[0][0]} .. {results[-1][0]}" if results else "",
    }
    if not failed:
        return dg.AssetCheckResult(
            passed=True,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata=metadata,
            description=f"realtime agrees with the correction in all {len(results)} hour(s)",
        )
    return dg.AssetCheckResult(
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR if errors else dg.AssetCheckSeverity.WARN,
        metadata=metadata,
        description=f"{len(failed)} of {len(results)} hour(s) failed: "
        + "; ".join(f"{hour}: {r.description}" for hour, r in failed[:3]),
    )


def build_correction_check(
    view: View, tolerance: Tolerance | None = None, views: Sequence[View] = ()
) -> dg.AssetChecksDefinition:
    """The blocking check of ``corrected_<view>``, partitioned by hour like its asset.

    Dagster 1.13 plans one execution per hour of a range run for a partitioned check but
    gives the returned result no hour; so each hour's result is logged as an evaluation with
    its partition (the UI's check page then says which hour failed), and the returned result,
    the one that gates the run, sums them up. A one-hour run returns its hour's result.
    ``views``: the checks that run beside it (their archive reads are shared,
    :func:`hourly_results`).
    """
    tolerance = tolerance or Tolerance()
    key = corrected_key(view.name)

    @dg.asset_check(
        asset=key,
        name=CORRECTION_CHECK,
        blocking=True,
        partitions_def=HOURLY,
        description=f"Every difference between realtime and corrected {view.name} is explained "
        "by late or duplicate events or sketch error (ERROR otherwise, blocking); WARN when "
        f"the {tolerance.statistic} relative error of exact metrics exceeds "
        f"{tolerance.relative:.0%}. One result per hour.",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, storage: StorageResource
    ) -> dg.AssetCheckResult:
        hours = run_hours(context)
        if hours is None:
            return not_partitioned("nothing to compare")
        with storage.open_tables() as tables:
            results = hourly_results(storage.open(), view, hours, tolerance, views, tables=tables)
        if context.op_execution_context.has_partition_key:
            return results[0][1]
        for hour, result in results:
            context.op_execution_context.log_event(
                hour_evaluation(context.instance, key, hour, result)
            )
        return summarize_hours(results)

    return _check


def build_correction_checks(
    views: Sequence[View], tolerance: Tolerance | None = None
) -> list[dg.AssetChecksDefinition]:
    """One check per enabled view; the tolerance defaults to :meth:`Tolerance.from_env`."""
    tolerance = tolerance or Tolerance.from_env()
    enabled = [v for v in views if not v.disabled]
    return [build_correction_check(v, tolerance, enabled) for v in enabled]
