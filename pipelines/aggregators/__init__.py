"""Mergeable aggregators, resolved by name through one registry.

May import: ``pipelines.exceptions`` only; every view and the Spark job resolve aggregators here.
"""

from pipelines.aggregators import builtin as _builtin  # noqa: F401  (registers the built-ins)
from pipelines.aggregators.base import AggregationSpec, Aggregator, InputKind
from pipelines.aggregators.registry import build, get, import_modules, names, register

__all__ = [
    "AggregationSpec",
    "Aggregator",
    "InputKind",
    "build",
    "get",
    "import_modules",
    "names",
    "register",
]
