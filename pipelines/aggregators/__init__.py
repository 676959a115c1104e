"""Mergeable aggregators, resolved by name through one registry.

May import: ``pipelines.exceptions`` and ``pipelines.expressions`` only; every view and the Spark job resolve aggregators here.
"""

from pipelines.aggregators import builtin as _builtin  # noqa: F401  (registers the built-ins)
from pipelines.aggregators import picks as _picks  # noqa: F401
from pipelines.aggregators import sketches as _sketches  # noqa: F401
from pipelines.aggregators import statistics as _statistics  # noqa: F401
from pipelines.aggregators.base import AggregationSpec, Aggregator, Columns, InputKind
from pipelines.aggregators.description import Description, Measure, Range, Reconciled
from pipelines.aggregators.registry import build, get, import_modules, names, register
from pipelines.aggregators.sketches import theta_set_operation

__all__ = [
    "AggregationSpec",
    "Aggregator",
    "Columns",
    "Description",
    "InputKind",
    "Measure",
    "Range",
    "Reconciled",
    "build",
    "get",
    "import_modules",
    "names",
    "register",
    "theta_set_operation",
]
