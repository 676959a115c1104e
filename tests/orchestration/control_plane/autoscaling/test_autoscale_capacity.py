from __future__ import annotations

import pytest

from orchestration.control_plane.autoscaling.capacity import (
    bucket_factor,
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


def test_key_buckets_let_four_partitions_keep_eight_and_sixteen_workers_busy() -> None:
    assert fleet_capacity(8, 4, 100.0) == fleet_capacity(4, 4, 100.0) == 400.0
    assert fleet_capacity(8, 4, 100.0, max_factor=4) == 800.0
    assert fleet_capacity(16, 4, 100.0, max_factor=4) == 1600.0
    assert bucket_factor(8, 4, 4) == 2 and bucket_factor(16, 4, 4) == 4
    # 6 workers: 8 tasks leave two workers with 2 (4 workers' worth); 16 tasks give 5.33
    assert bucket_factor(6, 4, 4) == 4 and bucket_factor(6, 4, 2) == 1
    assert bucket_factor(3, 4, 1) == 1 and bucket_factor(4, 4, 64) == 1  # no gain, no split
    assert bucket_factor(0, 4, 4) == 1 == bucket_factor(4, 0, 4)  # no workers, no partitions


def test_key_buckets_give_the_counts_between_24_and_32_over_288_partitions() -> None:
    assert bucket_factor(26, 288, 2) == 2
    assert fleet_capacity(26, 288, 1.0, max_factor=2) == pytest.approx(576 / 23)
    between = [c for c in efficient_counts(288, max_factor=2) if 24 <= c <= 32]
    assert between == [24, 26, 27, 28, 29, 31, 32]
    assert efficient_count(25, 288, max_factor=2) == 24  # 25 still carries what 24 do
    assert efficient_count(26, 288, max_factor=2) == 26


def test_a_rate_beyond_the_partitions_needs_more_workers_only_with_buckets() -> None:
    assert workers_for_rate(1000.0, 4, 100.0, 64) == 4  # capped by the partitions
    assert workers_for_rate(1000.0, 4, 100.0, 64, max_factor=4) == 16
    assert workers_for_rate(700.0, 4, 100.0, 64, max_factor=4) == 8
    assert fleet_capacity(8, 4, 100.0, max_factor=4) >= 700.0
