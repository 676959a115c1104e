"""The mergeable aggregator contract that stream workers and Spark both compile views to.

A task keeps one state per (window, group, aggregation); states from different tasks and
flushes are merged by readers. So every aggregator must be able to:

- ``initialize`` an empty state,
- ``update`` it with a columnar batch (numpy arrays of values and event times),
- ``merge`` two states (associative and commutative),
- ``serialize`` / ``deserialize`` it to bytes for segments and checkpoints,
- ``result`` it into the output columns named by ``output_fields``,
- and say how Spark computes the same output columns exactly (``spark_columns``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["AggregationSpec", "Aggregator", "InputKind"]

S = TypeVar("S")


class InputKind:
    """What columns an aggregation accepts."""

    NONE = "none"  # no column needed (count)
    NUMERIC = "numeric"
    ANY = "any"


@dataclass(frozen=True)
class AggregationSpec:
    """One entry of a view's ``aggregation_info``."""

    aggregation: str
    col_name: str | None
    aggregated_col_name: str
    params: dict[str, Any] = field(default_factory=dict)
    col_kind: str | None = None
    """Type of ``col_name`` in the event schema ("string" or "int"), filled in by validation."""


class Aggregator(ABC, Generic[S]):
    """Base of every aggregation; subclasses register themselves by ``name``."""

    name: ClassVar[str]
    input_kind: ClassVar[str] = InputKind.ANY
    params_schema: ClassVar[dict[str, type]] = {}
    """Parameters a view may set for this aggregation, with their types."""

    def __init__(self, spec: AggregationSpec) -> None:
        self.spec = spec
        self.out = spec.aggregated_col_name

    @property
    def state_key(self) -> str:
        """Identifies the state so that a changed definition never reads old state."""
        params = ",".join(f"{k}={v}" for k, v in sorted(self.spec.params.items()))
        return f"{self.name}({self.spec.col_name or ''};{params})"

    @abstractmethod
    def initialize(self) -> S: ...

    @abstractmethod
    def update(self, state: S, values: np.ndarray | None, times: np.ndarray) -> S: ...

    @abstractmethod
    def merge(self, a: S, b: S) -> S: ...

    @abstractmethod
    def serialize(self, state: S) -> bytes: ...

    @abstractmethod
    def deserialize(self, data: bytes) -> S: ...

    @abstractmethod
    def result(self, state: S) -> dict[str, Any]:
        """Final values, one per name in :meth:`output_fields`."""

    def output_fields(self) -> list[pa.Field]:
        """Output columns; most aggregations have one, named ``aggregated_col_name``."""
        return [pa.field(self.out, self.result_type())]

    def result_type(self) -> pa.DataType:
        return pa.float64()

    @abstractmethod
    def spark_columns(self, event_time: Column) -> list[Column]:
        """Spark aggregate expressions computing the exact output columns, aliased: one per
        :meth:`output_fields`, in that order (views sharing a pass rename them by position)."""
