"""The mergeable aggregator contract that stream workers and Spark both compile views to.

A task keeps one state per (window, group, aggregation); states from different tasks and
flushes are merged by readers. So every aggregator must be able to:

- ``initialize`` an empty state,
- ``update`` it with a columnar batch (numpy arrays of values and event times),
- ``merge`` two states (associative and commutative),
- ``serialize`` / ``deserialize`` it to bytes for segments and checkpoints,
- ``result`` it into the output columns named by ``output_fields``,
- and say how Spark computes the same output columns exactly (``spark_columns``).

Each also describes its output (:class:`~pipelines.aggregators.description.Description`):
its range, what it measures, how the stream is reconciled with the correction, and whether
Spark builds its state; quality derives its rules from that.

An aggregation reads its ``col_name`` (``values`` is that array), more columns when it says so
in :meth:`Aggregator.input_columns` (``values`` is then a :class:`Columns`), and only the rows
its own ``where:`` keeps and none of its inputs is null in, as SQL's aggregates skip nulls (the
caller applies :meth:`Aggregator.rows`; Spark expressions wrap their inputs in
:meth:`Aggregator.only`). Over no value a result is null, the counts' 0 excepted
(:attr:`Aggregator.counts`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
import orjson
import pyarrow as pa

from pipelines.aggregators.description import Description
from pipelines.aggregators.nulls import NullMasks, with_nulls
from pipelines.expressions import Filter, parse_filter

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "AggregationSpec",
    "Aggregator",
    "Columns",
    "InputKind",
    "JsonState",
    "exact_value",
    "json_state",
    "json_values",
    "number_type",
    "python_value",
    "spark_functions",
    "spark_type",
    "split_label",
    "value_type",
]

S = TypeVar("S")


class InputKind:
    """What columns an aggregation accepts; :meth:`types` names the declared column types."""

    NONE = "none"  # no column needed (count)
    NUMERIC = "numeric"
    HASHED = "hashed"
    """What the distinct-count sketches hash alike in the stream and in Spark
    (``hll_sketch_agg`` takes no double or boolean)."""
    ANY = "any"

    _TYPES: ClassVar[dict[str, tuple[str, ...]]] = {
        NONE: (),
        NUMERIC: ("long", "double"),
        HASHED: ("string", "long", "timestamp"),
        ANY: ("string", "long", "double", "boolean", "timestamp"),
    }

    @classmethod
    def types(cls, kind: str) -> tuple[str, ...]:
        """The declared column types (``ColumnType`` values) an input ``kind`` takes."""
        return cls._TYPES[kind]


def value_type(col_kind: str | None, default: pa.DataType | None = None) -> pa.DataType:
    """The Arrow type of one value of a column of :attr:`AggregationSpec.col_kind` (a picked
    value, a min or max): a long or timestamp stays an exact integer (epoch ms for a
    timestamp); ``default`` (a string) where the kind is unknown."""
    known = {
        "int": pa.int64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "string": pa.string(),
    }
    return known.get(col_kind or "", default or pa.string())


@dataclass(frozen=True)
class AggregationSpec:
    """One entry of a view's ``aggregation_info``."""

    aggregation: str
    col_name: str | None
    aggregated_col_name: str
    params: dict[str, Any] = field(default_factory=dict)
    col_kind: str | None = None
    """Type of ``col_name`` in its topic's declaration, filled in by validation: "int" (a long
    or a timestamp), "double", "boolean" or "string"."""
    where: str | None = None
    """This aggregation's own filter (``where:``): only events it keeps are aggregated."""
    nullable_input: bool = False
    """Whether a column it reads (``col_name``, a column parameter) may be null in its topic's
    declaration, filled in by validation: a group may then have no value of it."""


class Columns(tuple):
    """Several input columns of one batch, indexed together (``values[idx]``)."""

    def __getitem__(self, idx: Any) -> Any:  # type: ignore[override]
        if isinstance(idx, int):
            return tuple.__getitem__(self, idx)
        return Columns(column[idx] for column in self)


class Aggregator(ABC, Generic[S]):
    """Base of every aggregation; subclasses register themselves by ``name``."""

    name: ClassVar[str]
    description: ClassVar[Description]
    """What its output is, for quality and reconciliation (every registered class has one)."""
    input_kind: ClassVar[str] = InputKind.ANY
    params_schema: ClassVar[dict[str, type]] = {}
    """Parameters a view may set for this aggregation, with their types."""
    column_params: ClassVar[dict[str, str]] = {}
    """Parameters that name another event column, with the :class:`InputKind` it must have
    (``by`` of max_by, ``denominator`` of ratio); that column is then an input too."""
    required_params: ClassVar[tuple[str, ...]] = ()
    needs_where: ClassVar[bool] = False
    """The aggregation means nothing without its own ``where:`` (count_if, sum_if)."""
    may_be_null: ClassVar[bool] = False
    """A group's result may be null although the group has values (variance of one value,
    a ratio over a zero denominator); any result may be null under the aggregation's where:
    or over a nullable column (SQL's aggregate over no value)."""
    counts: ClassVar[bool] = False
    """Over no value it gives 0, not null: the counts (count, count_distinct, the distinct
    estimates, histogram bins), as SQL's ``count`` does."""

    @property
    def nullable(self) -> bool:
        """Whether an output row of this aggregation may hold a null."""
        if self.counts:
            return self.may_be_null
        return self.may_be_null or self.where is not None or self.spec.nullable_input

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> str | None:
        """What is wrong with ``params`` beyond their types (None: nothing)."""
        return None

    def __init__(self, spec: AggregationSpec) -> None:
        self.spec = spec
        self.out = spec.aggregated_col_name
        self.where: Filter | None = None if spec.where is None else parse_filter(spec.where)

    @property
    def state_key(self) -> str:
        """Identifies the state so that a changed definition never reads old state."""
        params = ",".join(f"{k}={v}" for k, v in sorted(self.spec.params.items()))
        where = "" if self.where is None else f";where={self.where.text}"
        return f"{self.name}({self.spec.col_name or ''};{params}{where})"

    def input_columns(self) -> tuple[str, ...]:
        """Event columns ``update`` receives as ``values``: ``col_name``, then the columns
        named by :attr:`column_params` (a :class:`Columns` when there are several)."""
        own = (self.spec.col_name,) if self.spec.col_name else ()
        return own + tuple(self.spec.params[p] for p in self.column_params if p in self.spec.params)

    def columns_read(self) -> set[str]:
        """Every event column this aggregation needs, its filter's included."""
        return set(self.input_columns()) | (set(self.where.fields) if self.where else set())

    def inputs(self, columns: dict[str, np.ndarray]) -> Any:
        """``values`` for ``update`` from a batch's columns (None, one array or Columns)."""
        names = self.input_columns()
        if not names:
            return None
        if len(names) == 1:
            return columns[names[0]]
        return Columns(columns[name] for name in names)

    def rows(
        self, columns: dict[str, np.ndarray], masks: NullMasks | None = None
    ) -> np.ndarray | None:
        """The batch rows this aggregation reads (None: all of them): those its ``where:``
        keeps and where none of its :meth:`input_columns` is null (SQL's aggregates skip
        nulls). ``masks`` says where the batch's columns are null (None: nowhere)."""
        keep = None
        if self.where is not None:
            seen = columns if masks is None else with_nulls(columns, masks, self.where.fields)
            keep = self.where.mask(seen)
        present = None if masks is None else masks.present(self.input_columns())
        if present is not None:
            keep = present if keep is None else keep & present
        return keep

    def only(self, column: Column) -> Column:
        """``column`` where this aggregation's filter holds and none of its inputs is null,
        else null (Spark aggregates skip nulls, so it sees exactly the rows the stream's does:
        a pair such as max_by's (by, value) is skipped when either is null, as the stream
        skips the row)."""
        from pyspark.sql import functions as F

        kept = [F.col(name).isNotNull() for name in self.input_columns()]
        if self.where is not None:
            kept.insert(0, self.where.spark())
        if not kept:
            return column
        test = kept[0]
        for more in kept[1:]:
            test = test & more
        return F.when(test, column)

    def spark_input(self, name: str | None = None) -> Column:
        """An input column (``col_name`` by default), filtered by :meth:`only`."""
        from pyspark.sql import functions as F

        return self.only(F.col(name or self.spec.col_name))

    @abstractmethod
    def initialize(self) -> S: ...

    @abstractmethod
    def update(self, state: S, values: np.ndarray | None, times: np.ndarray) -> S: ...

    def update_groups(
        self, states: list[S], values: Any, times: np.ndarray, bounds: np.ndarray
    ) -> None:
        """Fold a batch into many groups' states at once, in place: rows ``bounds[g]`` to
        ``bounds[g + 1]`` (sorted by group, none empty) are group ``g``'s.

        This is the reference: one :meth:`update` per group. Aggregations override it with
        one numpy reduction over every group when that gives the same states; an override
        holds only for the class whose ``update`` it reproduces (:meth:`own_update`)."""
        self.update_each(states, values, times, bounds)

    def update_each(
        self, states: list[S], values: Any, times: np.ndarray, bounds: np.ndarray
    ) -> None:
        """:meth:`update_groups` by one :meth:`update` per group (the per-group reference)."""
        cuts = bounds.tolist()
        update = self.update
        for g in range(len(states)):
            a, b = cuts[g], cuts[g + 1]
            states[g] = update(states[g], None if values is None else values[a:b], times[a:b])

    def own_update(self, cls: type) -> bool:
        """True if this aggregation updates as ``cls`` does (a subclass that redefines
        ``update`` must not inherit ``cls``'s batch version of it)."""
        return type(self).update is cls.update

    @abstractmethod
    def merge(self, a: S, b: S) -> S: ...

    @abstractmethod
    def serialize(self, state: S) -> bytes: ...

    @abstractmethod
    def deserialize(self, data: bytes) -> S: ...

    def deserialize_many(self, blobs: Sequence[bytes]) -> list[S]:
        """The states of a column of blobs (a segment's rows), as :meth:`deserialize` reads
        each: serving and reconciling read tens of thousands at once."""
        return [self.deserialize(b) for b in blobs]

    @abstractmethod
    def result(self, state: S) -> dict[str, Any]:
        """Final values, one per name in :meth:`output_fields`."""

    def output_fields(self) -> list[pa.Field]:
        """Output columns; most aggregations have one, named ``aggregated_col_name``."""
        return [pa.field(self.out, self.result_type())]

    def result_type(self) -> pa.DataType:
        return pa.float64()

    def ordered_outputs(self) -> list[str]:
        """Output columns whose values never decrease from one to the next (quantiles by
        rank, an estimate between its bounds); empty when the outputs have no order."""
        return []

    def spark_state(self, event_time: Column) -> Column | None:
        """A Spark aggregate giving this aggregation's serialized state, in the stream's own
        format, so corrected rows keep it beside the result and roll up (None: Spark cannot
        build it; the corrected row then holds a null state)."""
        return None

    @abstractmethod
    def spark_columns(self, event_time: Column) -> list[Column]:
        """Spark aggregate expressions computing the exact output columns, aliased: one per
        :meth:`output_fields`, in that order (views sharing a pass rename them by position)."""


class JsonState(Aggregator[Any]):
    """States that are plain JSON values (numbers, pairs, lists)."""

    def serialize(self, state: Any) -> bytes:
        return orjson.dumps(state)

    def deserialize(self, data: bytes) -> Any:
        return orjson.loads(data)

    def deserialize_many(self, blobs: Sequence[bytes]) -> list[Any]:
        values = json_values(blobs)
        return super().deserialize_many(blobs) if values is None else values


def number_type(agg: Aggregator) -> pa.DataType:
    """A sum's type: an exact integer over a long column, a double otherwise."""
    return pa.int64() if agg.spec.col_kind == "int" else pa.float64()


_SPARK_TYPES = {pa.int64(): "long", pa.float64(): "double", pa.bool_(): "boolean"}


def spark_type(agg: Aggregator) -> str:
    """The Spark type of ``agg``'s one output column (what its Spark aggregate is cast to)."""
    return _SPARK_TYPES.get(agg.result_type(), "string")


def exact_value(agg: Aggregator, value: Any) -> Any:
    """A state's value as ``agg``'s one output column holds it (an int stays exact)."""
    kind = agg.result_type()
    if kind == pa.int64():
        return int(value)
    if kind == pa.float64():
        return float(value)
    return value


def python_value(value: Any) -> Any:
    """A numpy scalar as the Python value JSON states hold (other values as they are)."""
    return value.item() if isinstance(value, np.generic) else value


def json_values(blobs: Sequence[bytes]) -> list[Any] | None:
    """Each blob's JSON value, in one parse of them all as one array; None if that does not
    give one value per blob (a blank or malformed blob: read them one by one instead)."""
    try:
        values = orjson.loads(b"[" + b",".join(blobs) + b"]")
    except (TypeError, orjson.JSONDecodeError):
        return None
    return values if len(values) == len(blobs) else None


def spark_functions() -> Any:
    """``pyspark.sql.functions``, imported only where Spark runs (stream workers never do)."""
    from pyspark.sql import functions

    return functions


def split_label(point: float) -> str:
    """A split point as part of a column name: 100 -> "100", 0.5 -> "0_5", -3 -> "m3"."""
    return f"{point:g}".replace("-", "m").replace(".", "_").replace("+", "")


def json_state(*parts: Column) -> Column:
    """A JSON list of Spark values as the stream's ``orjson`` state bytes (a single value
    when there is one part): numbers as numbers, strings quoted, null as null."""
    F = spark_functions()

    def value(column: Column) -> Column:
        return F.regexp_extract(F.to_json(F.array(column)), r"^\[(.*)\]$", 1)

    if len(parts) == 1:
        text = value(parts[0])
    else:
        text = F.concat(F.lit("["), F.concat_ws(",", *(value(p) for p in parts)), F.lit("]"))
    return text.cast("binary")
