from __future__ import annotations

import pytest

from orchestration.autoscaling.capacity import (
    efficient_count,
    efficient_counts,
    fleet_capacity,
    max_partitions_per_worker,
    workers_for_rate,
)


def test_metamarkets_288_partitions_29_workers_are_bounded_by_the_most_loaded() -> None:
    # 288 = 29*9 + 27: 27 workers hold 10 partitions, so capacity is 288/10 workers' worth
    assert max_partitions_per_worker(29, 288) == 10
    assert fleet_capacity(29, 288, 1000.0) == pytest.approx(28800.0)
    assert fleet_capacity(24, 288, 1000.0) == pytest.approx(24000.0)
    assert fleet_capacity(32, 288, 1000.0) == pytest.approx(32000.0)
    # 25 workers carry no more than 24: the 25th only unloads the less loaded ones
    assert fleet_capacity(25, 288, 1000.0) == fleet_capacity(24, 288, 1000.0)


def test_workers_beyond_partitions_add_nothing() -> None:
    assert fleet_capacity(20, 16, 100.0) == fleet_capacity(16, 16, 100.0) == 1600.0
    assert fleet_capacity(0, 16, 100.0) == 0.0


@pytest.mark.parametrize(
    ("workers", "expected"), [(25, 24), (26, 24), (27, 27), (30, 29), (31, 29), (32, 32), (1, 1)]
)
def test_efficient_count_snaps_to_the_cheapest_equal_capacity(workers: int, expected: int) -> None:
    assert efficient_count(workers, 288) == expected


def test_efficient_counts_between_24_and_32() -> None:
    assert [c for c in efficient_counts(288) if 24 <= c <= 32] == [24, 27, 29, 32]


@pytest.mark.parametrize(
    ("rate", "expected"), [(32000.0, 32), (26000.0, 27), (24000.0, 24), (500.0, 1), (0.0, 1)]
)
def test_workers_for_rate(rate: float, expected: int) -> None:
    assert workers_for_rate(rate, 288, 1000.0, 288) == expected
    assert fleet_capacity(expected, 288, 1000.0) >= rate
