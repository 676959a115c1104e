"""What a reconciliation finds: per view and hour, per metric."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipelines.segments import hour_label
from pipelines.views.model import View
from quality.causes import Causes
from quality.compare import Comparison

__all__ = ["MetricReconciliation", "Reconciliation", "TablesRead"]

TablesRead = Callable[[View, int, pa.Table, pa.Table], None]
"""Told (view, hour, corrected, realtime) for each corrected hour a reconciliation read."""


@dataclass(frozen=True)
class MetricReconciliation:
    """How one metric's differences split into explained and unexplained rows."""

    column: str
    kind: str
    aggregation: str
    compared: int
    differing: int = 0
    explained: int = 0
    unexplained: int = 0
    allowed: int = 0
    """Unexplained (or beyond-sigma) rows the tolerance allows."""
    rule: str = ""
    passed: bool = True
    samples: list[dict[str, Any]] = field(default_factory=list)
    """A few unexplained rows: key, realtime, exact, and the window's causes."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "kind": self.kind,
            "aggregation": self.aggregation,
            "compared": self.compared,
            "differing": self.differing,
            "explained": self.explained,
            "unexplained": self.unexplained,
            "allowed": self.allowed,
            "rule": self.rule,
            "passed": self.passed,
            "samples": self.samples,
        }


@dataclass(frozen=True)
class Reconciliation:
    """One view and hour: the comparison, its causes, and whether the causes explain it."""

    view: str
    hour_ms: int
    corrected: bool
    """False when the hour has no published correction: nothing was compared."""
    comparison: Comparison | None
    causes: Causes
    metrics: list[MetricReconciliation] = field(default_factory=list)
    groups_missing_explained: int = 0
    groups_unexplained: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def label(self) -> str:
        return hour_label(self.hour_ms)

    def summary(self) -> dict[str, Any]:
        """Plain JSON-able values for reports and check metadata."""
        return {
            "view": self.view,
            "hour": self.label,
            "corrected": self.corrected,
            "passed": self.passed,
            "failures": self.failures,
            "causes": self.causes.as_dict(),
            "groups_missing_explained": self.groups_missing_explained,
            "groups_unexplained": self.groups_unexplained,
            "comparison": self.comparison.summary() if self.comparison else None,
            "metrics": [m.as_dict() for m in self.metrics],
        }
