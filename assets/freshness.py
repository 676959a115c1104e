"""How fresh the realtime views, the corrections and the report should be: Dagster freshness
policies.

A corrected view is expected to materialize about once an hour (an hour closes, its
correction runs); the report once a day. The policies are windows of wall time since the
last materialization, so the asset page and the catalog say "fresh", "warning" or "overdue"
at a glance and an operator sees a stalled automation (a stopped sensor, a failing
correction, a fleet whose watermark stopped) without reading run logs. Dagster's freshness
daemon evaluates them; they judge when data last arrived, not which event-time hour it was.
A realtime view is materialized by the ``realtime_lag`` sensor while its stream is current
(Dagster 1.13 judges freshness by materializations alone), so its policy says whether the
stream is keeping up now.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import dagster as dg

from assets.constants import CORRECTED_PREFIX, REALTIME_PREFIX, RECONCILIATION_REPORT_KEY

__all__ = ["correction_freshness", "realtime_freshness", "report_freshness", "with_freshness"]


def realtime_freshness(fail_minutes: int) -> dg.FreshnessPolicy:
    """Overdue ``fail_minutes`` after the stream was last seen current; warning at 3/4."""
    return correction_freshness(fail_minutes)


def correction_freshness(fail_minutes: int) -> dg.FreshnessPolicy:
    """Overdue ``fail_minutes`` after the last correction; warning at three quarters of it."""
    return dg.FreshnessPolicy.time_window(
        fail_window=timedelta(minutes=fail_minutes),
        warn_window=timedelta(minutes=fail_minutes * 3 / 4),
    )


def report_freshness(fail_hours: int) -> dg.FreshnessPolicy:
    """Overdue ``fail_hours`` after the last report; warning an hour before."""
    return dg.FreshnessPolicy.time_window(
        fail_window=timedelta(hours=fail_hours),
        warn_window=timedelta(hours=max(fail_hours - 1, fail_hours / 2)),
    )


def with_freshness(
    assets: Iterable[Any],
    correction_fail_minutes: int,
    report_fail_hours: int,
    realtime_fail_minutes: int | None = None,
) -> list[Any]:
    """``assets`` with the correction policy on each ``corrected_<view>``, the realtime one on
    each ``realtime_<view>`` (if given) and the report's on the report; other assets (and
    source assets) unchanged."""
    correction = correction_freshness(correction_fail_minutes)
    report = report_freshness(report_fail_hours)
    realtime = realtime_freshness(realtime_fail_minutes) if realtime_fail_minutes else None

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        if spec.key == RECONCILIATION_REPORT_KEY:
            return dg.apply_freshness_policy(spec, report)
        if spec.key.path[-1].startswith(CORRECTED_PREFIX):
            return dg.apply_freshness_policy(spec, correction)
        if realtime is not None and spec.key.path[-1].startswith(REALTIME_PREFIX):
            return dg.apply_freshness_policy(spec, realtime)
        return spec

    return [a.map_asset_specs(apply) if isinstance(a, dg.AssetsDefinition) else a for a in assets]
