"""The JSON Schema of a views file, so editors check ``views.yaml`` as users type.

It is the models' own schema (:class:`~pipelines.views.definitions.ViewsFile`) plus what only
the aggregator registry knows at the time it is printed: the aggregation names, and for each
aggregation whether it needs a column (the topic's declaration says which) and the parameters
it takes. ``data/views.schema.json`` is this output (``sluice views schema``); a test keeps it
current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipelines.aggregators import InputKind, get, names
from pipelines.views.aggregation_info import PARAM_RANGES
from pipelines.views.definitions import ViewsFile

__all__ = ["SCHEMA_DIALECT", "views_json_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array"}


def views_json_schema(aggregations: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a views file, for the ``aggregations`` named
    (default: every one registered, custom modules' included)."""
    known = names() if aggregations is None else list(aggregations)
    schema = {"$schema": SCHEMA_DIALECT, **ViewsFile.model_json_schema()}
    aggregation = schema["$defs"]["AggregationDefinition"]
    aggregation["properties"]["aggregation"]["enum"] = known
    aggregation["allOf"] = [_rules_of(name) for name in known]
    return schema


def _rules_of(name: str) -> dict[str, Any]:
    """``if aggregation is name then`` its column and parameters."""
    cls = get(name)
    params = _params_schema(cls.params_schema)
    for key in cls.column_params:
        params["properties"][key] = {"type": "string"}  # a column of the topic's declaration
    if cls.required_params:
        params["required"] = list(cls.required_params)
    then: dict[str, Any] = {"properties": {"params": params}}
    required = ["params"] if cls.required_params else []
    if cls.needs_where:
        required.append("where")
    if cls.input_kind != InputKind.NONE:
        required.append("col_name")
    if required:
        then["required"] = sorted(required)
    return {
        "if": {"properties": {"aggregation": {"const": name}}, "required": ["aggregation"]},
        "then": then,
    }


def _params_schema(params: dict[str, type]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for key, kind in params.items():
        rule: dict[str, Any] = {"type": _JSON_TYPES.get(kind, "string")}
        if key in PARAM_RANGES:
            rule["minimum"], rule["maximum"] = PARAM_RANGES[key]
        if key == "quantiles":
            rule.update(minItems=1, items={"type": "number", "minimum": 0, "maximum": 1})
        if key == "split_points":
            rule.update(minItems=1, items={"type": "number"})
        properties[key] = rule
    return {"type": ["object", "null"], "properties": properties, "additionalProperties": False}
