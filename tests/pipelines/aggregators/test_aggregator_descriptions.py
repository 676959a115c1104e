"""Every aggregation describes its output, and the description agrees with what it does."""

from __future__ import annotations

import pytest

from pipelines.aggregators import (
    Aggregator,
    Description,
    Measure,
    Range,
    Reconciled,
    get,
    names,
    register,
)
from pipelines.aggregators.builtin import Count


@pytest.mark.parametrize("name", names())
def test_every_registered_aggregation_has_a_description(name: str) -> None:
    description = get(name).description
    assert isinstance(description, Description)
    assert isinstance(description.range, Range)
    assert isinstance(description.measure, Measure)
    assert isinstance(description.reconciled, Reconciled)


@pytest.mark.parametrize("name", names())
def test_spark_builds_the_state_exactly_where_the_description_says(name: str) -> None:
    cls = get(name)
    assert cls.description.spark_state == (cls.spark_state is not Aggregator.spark_state)


def test_an_aggregation_without_a_description_is_refused() -> None:
    class Undescribed(Count):
        name = "undescribed"
        description = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="'undescribed' has no description"):
        register(Undescribed)
    assert "undescribed" not in names()


def test_a_reproduced_sketch_needs_the_state_spark_builds() -> None:
    with pytest.raises(ValueError, match="reproduced sketch"):
        Description(Range.NON_NEGATIVE, Measure.ESTIMATE, Reconciled.REPRODUCED_SKETCH, False)


def test_each_reconciliation_is_exact_bounded_or_informational() -> None:
    for how in Reconciled:
        assert how.exact + how.rank_error + how.informational <= 1
    assert {h for h in Reconciled if h.exact} == {Reconciled.EVENT_COUNT, Reconciled.EXACT}
