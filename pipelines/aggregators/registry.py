"""Aggregations by name: the one place stream workers and Spark resolve them."""

from __future__ import annotations

import importlib
from typing import TypeVar

from pipelines.aggregators.base import AggregationSpec, Aggregator
from pipelines.aggregators.description import Description
from pipelines.exceptions import ConfigError, UnknownAggregation

__all__ = ["build", "get", "import_modules", "names", "register"]

_REGISTRY: dict[str, type[Aggregator]] = {}

A = TypeVar("A", bound=type[Aggregator])


def register(cls: A) -> A:
    """Class decorator: make ``cls`` available to views under ``cls.name``; it must describe
    its output (a :class:`Description`), which quality's rules are derived from."""
    if not isinstance(getattr(cls, "description", None), Description):
        raise TypeError(f"aggregation {cls.name!r} has no description (a Description)")
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


def import_modules(modules: str) -> list[str]:
    """Import the comma-separated ``modules`` (SLUICE_AGGREGATOR_MODULES) so the aggregations
    they register are known; the names imported."""
    names_ = [m.strip() for m in modules.split(",") if m.strip()]
    for module in names_:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise ConfigError(
                f"SLUICE_AGGREGATOR_MODULES: cannot import {module!r}: {type(exc).__name__}: {exc}"
            ) from exc
    return names_
