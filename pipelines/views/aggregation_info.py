"""One entry of a view's ``aggregation_info``, checked against the aggregator registry.

Which column an aggregation needs and which parameters it takes are the registry's to say
(``input_kind``, ``params_schema``); this model asks it, so a new aggregation needs no change
here. An unknown name is its own error type, so the loader can raise ``UnknownAggregation``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from pipelines.aggregators import AggregationSpec, InputKind, get
from pipelines.events.declaration import ColumnType
from pipelines.exceptions import UnknownAggregation
from pipelines.views.fields import (
    DefinitionModel,
    OutputName,
    WhereText,
    declared_columns,
    listing,
    problem,
)

__all__ = ["PARAM_RANGES", "UNKNOWN_AGGREGATION", "AggregationDefinition", "Aggregations"]

UNKNOWN_AGGREGATION = "unknown_aggregation"
PARAM_RANGES: dict[str, tuple[int, int]] = {
    "lg_k": (4, 21),
    "k": (1, 65535),
    "lg_max_map_size": (3, 24),
}
"""Integer parameters of the registry's aggregations and their bounds, inclusive."""

NUMERIC_TYPES = (ColumnType.LONG, ColumnType.DOUBLE)
"""What an aggregation of numeric input takes."""
ORDERING_TYPES = (*NUMERIC_TYPES, ColumnType.TIMESTAMP)
"""What a numeric column parameter takes (``max_by``'s ``by``): the event time orders too."""
_COL_KINDS = {ColumnType.LONG: "int", ColumnType.TIMESTAMP: "int"}
""":attr:`AggregationSpec.col_kind` of a column type (its own name otherwise)."""


def _type_refusal(
    name: str, col: str, declared: tuple[str, dict[str, ColumnType]], takes: tuple[str, ...]
) -> str:
    topic, columns = declared
    kinds = f"{', '.join(takes[:-1])} or {takes[-1]}"
    return f"{col!r} is a {columns[col]} column of topic {topic!r}; {name} takes {kinds}"


def _known_aggregation(name: Any) -> Any:
    try:
        get(str(name))
    except UnknownAggregation as exc:
        raise problem(str(exc), kind=UNKNOWN_AGGREGATION) from None
    return str(name)


def _check_params(
    name: str | None, params: Any, declared: tuple[str, dict[str, ColumnType]] | None
) -> dict[str, Any]:
    """``params`` against the aggregation's ``params_schema``, then the known bounds (only
    the shape when the aggregation is unknown)."""
    params = params or {}
    if not isinstance(params, Mapping):
        raise problem("expected a mapping")
    if name is None:
        return dict(params)
    schema = get(name).params_schema
    for key, value in params.items():
        expected = schema.get(key)
        if expected is None:
            allowed = ", ".join(schema) or "none"
            raise problem(f"{name} has no parameter {key!r} (has: {allowed})")
        if not isinstance(value, expected) or isinstance(value, bool):
            raise problem(f"expected {expected.__name__}, got {value!r}", field=key)
    for key, kind in get(name).column_params.items():
        col = params.get(key)
        if col is None or declared is None:
            continue
        topic, columns = declared
        if col not in columns:
            shown = listing(topic, columns, lambda c: True)
            raise problem(f"unknown column {col!r} ({shown})", field=key)
        if kind == InputKind.NUMERIC and columns[col] not in ORDERING_TYPES:
            raise problem(
                _type_refusal(f"{name}'s {key}", col, declared, ORDERING_TYPES), field=key
            )
    missing = [key for key in get(name).required_params if key not in params]
    if missing:
        raise problem(f"{name} needs params {', '.join(missing)}")
    wrong = get(name).check_params(dict(params))
    if wrong is not None:
        raise problem(wrong)
    quantiles = params.get("quantiles")
    if quantiles is not None and (
        not quantiles or not all(isinstance(q, int | float) and 0 <= q <= 1 for q in quantiles)
    ):
        raise problem(f"{quantiles!r} must be numbers in [0, 1]", field="quantiles")
    for key, (low, high) in PARAM_RANGES.items():
        value = params.get(key)
        if value is not None and not low <= value <= high:
            raise problem(f"{value} outside [{low}, {high}]", field=key)
    return dict(params)


class AggregationDefinition(DefinitionModel):
    """One entry of ``aggregation_info``: which aggregation, over which column, named how."""

    aggregation: Annotated[str, BeforeValidator(_known_aggregation)] = Field(
        description="An aggregation of the registry (see the README's aggregation table)."
    )
    col_name: str | None = Field(
        default=None,
        validate_default=True,
        description="The declared column aggregated; count takes none, sum/mean/quantiles a "
        "long or double one (docs/aggregations.md lists each aggregation's types).",
    )
    aggregated_col_name: OutputName = Field(description="The output column's name.")
    params: dict[str, Any] | None = Field(
        default=None,
        validate_default=True,
        description="The aggregation's parameters, e.g. {k: 5} for top_k.",
    )
    where: WhereText | None = Field(
        default=None,
        description="Aggregate only the events this filter keeps, e.g. \"event_type = 'error'\""
        " (see docs/aggregations.md); required by count_if and sum_if.",
    )

    @field_validator("col_name", mode="before")
    @classmethod
    def _column_fits(cls, col: Any, info: ValidationInfo) -> Any:
        name = info.data.get("aggregation")  # None: it is unknown, and its own error says so
        needs = InputKind.ANY if name is None else get(name).input_kind
        if col is None:
            if name is not None and needs != InputKind.NONE:
                raise problem(f"{name} needs a column")
            return col
        declared = declared_columns(info)
        if not isinstance(col, str):
            raise problem(f"unknown column {col!r}")
        if declared is None:
            return col
        topic, columns = declared
        if col not in columns:
            shown = "" if needs == InputKind.NONE else f" ({listing(topic, columns, bool)})"
            raise problem(f"unknown column {col!r}{shown}")
        takes = InputKind.types(needs)
        if needs != InputKind.NONE and columns[col] not in takes:
            raise problem(_type_refusal(str(name), col, declared, takes))
        return col

    @field_validator("params", mode="before")
    @classmethod
    def _params_fit(cls, params: Any, info: ValidationInfo) -> Any:
        return _check_params(info.data.get("aggregation"), params, declared_columns(info))

    @model_validator(mode="after")
    def _where_needed(self) -> AggregationDefinition:
        if get(self.aggregation).needs_where and self.where is None:
            raise problem(f"{self.aggregation} needs a where: (the events it counts or sums)")
        return self

    def to_spec(
        self, columns: Mapping[str, ColumnType] | None = None, nullable: Collection[str] = ()
    ) -> AggregationSpec:
        """The spec; ``columns``, the topic's declared ones, give its column's kind, and
        ``nullable``, those that may be null, whether it may have no value."""
        read = [
            self.col_name,
            *((self.params or {}).get(p) for p in get(self.aggregation).column_params),
        ]
        kind = None
        declared = None if columns is None or self.col_name is None else columns.get(self.col_name)
        if get(self.aggregation).input_kind != InputKind.NONE and declared is not None:
            kind = _COL_KINDS.get(declared, declared.value)
        return AggregationSpec(
            self.aggregation,
            self.col_name,
            self.aggregated_col_name,
            dict(self.params or {}),
            kind,
            self.where,
            any(c in nullable for c in read if c is not None),
        )


def _non_empty_list(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise problem("expected a non-empty list")
    return value


Aggregations = Annotated[
    list[AggregationDefinition],
    Field(min_length=1, description="What to compute: one or more aggregations."),
    BeforeValidator(_non_empty_list),
]
