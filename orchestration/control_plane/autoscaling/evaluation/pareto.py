"""Pareto, not one number: which policies another beats on every count of a trace.

A policy is dominated when another used no more worker-hours, made no more rescales and had no
more SLA-violation minutes, and strictly fewer of one: nobody would pick it, whatever price
they put on a rescale or a late minute. Of the undominated ones, which is best depends on those
prices, and the benchmark does not pretend to know them.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestration.control_plane.autoscaling.simulator import PolicySummary

__all__ = ["dominated_by", "dominates"]

_TOLERANCE = 1e-9


def _counts(s: PolicySummary) -> tuple[float, float, float]:
    return (s.worker_hours, float(s.rescales), s.sla_violation_minutes)


def dominates(a: PolicySummary, b: PolicySummary) -> bool:
    """True if ``a`` is no worse than ``b`` on worker-hours, rescales and SLA minutes, and
    better on one (same trace, same replay)."""
    pairs = list(zip(_counts(a), _counts(b), strict=True))
    no_worse = all(x <= y + _TOLERANCE * max(abs(y), 1.0) for x, y in pairs)
    better = any(x < y - _TOLERANCE * max(abs(y), 1.0) for x, y in pairs)
    return no_worse and better


def dominated_by(summaries: Sequence[PolicySummary]) -> dict[str, list[str]]:
    """For each policy of one trace, the policies that dominate it (empty: on the front)."""
    return {
        s.policy: [o.policy for o in summaries if o is not s and dominates(o, s)] for s in summaries
    }
