"""Aggregations by name: the one place stream workers and Spark resolve them."""

from __future__ import annotations

from typing import TypeVar

from pipelines.aggregators.base import AggregationSpec, Aggregator
from pipelines.exceptions import UnknownAggregation

__all__ = ["build", "get", "names", "register"]

_REGISTRY: dict[str, type[Aggregator]] = {}

A = TypeVar("A", bound=type[Aggregator])


def register(cls: A) -> A:
    """Class decorator: make ``cls`` available to views under ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"aggregation {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> type[Aggregator]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownAggregation(
            f"unknown aggregation {name!r} (known: {', '.join(names())})"
        ) from None


def names() -> list[str]:
    return sorted(_REGISTRY)


def build(spec: AggregationSpec) -> Aggregator:
    return get(spec.aggregation)(spec)
