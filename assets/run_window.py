"""What a check's run covers: its partition range as epoch ms or hours, shared by every check.

A check on a partitioned asset looks only at what its run materialized; a run without a
partition (an ad-hoc materialization) gets ``None`` and a WARN result saying so.
"""

import dagster as dg

from pipelines.segments import hours_in_window

__all__ = ["not_partitioned", "run_hours", "run_window_ms"]


def run_window_ms(context: dg.AssetCheckExecutionContext) -> tuple[int, int] | None:
    """The run's partition range as epoch ms, or None when the run is not partitioned."""
    op_context = context.op_execution_context
    if not (op_context.has_partition_key or op_context.has_partition_key_range):
        return None
    window = op_context.partition_time_window
    return int(window.start.timestamp() * 1000), int(window.end.timestamp() * 1000)


def run_hours(context: dg.AssetCheckExecutionContext) -> list[int] | None:
    """Hour starts of the run's partition range, or None when the run is not partitioned."""
    op_context = context.op_execution_context
    if not (op_context.has_partition_key or op_context.has_partition_key_range):
        return None
    return hours_in_window(*op_context.partition_time_window)


def not_partitioned(what: str) -> dg.AssetCheckResult:
    """The result of a check whose run had no partition: nothing to look at."""
    return dg.AssetCheckResult(
        passed=True,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"not run in a partitioned run: {what}",
    )
