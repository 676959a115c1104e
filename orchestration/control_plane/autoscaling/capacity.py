"""Uneven partition load: what W workers over P partitions can really process.

Partitions are the unit of assignment, so with 288 partitions and 29 workers some workers hold
10 partitions and others 9; traffic is spread evenly over partitions, so the most loaded
worker saturates first and its partitions lag first. The fleet's sustainable input rate is
therefore P / ceil(P / W) partitions' worth of one worker's rate, not W times it.

With key buckets (virtual tasks, ``max_factor`` > 1) the unit is a task: the coordinator
splits each partition into the factor that gives the workers the most capacity
(:func:`bucket_factor`), so 26 workers over 288 partitions split in two (576 tasks, 23 on the
busiest) carry 25 workers' worth, and 4 partitions can keep 8 or 16 workers busy. A bucket
reads its whole partition to keep its share, a cost this model leaves to the measured worker
rate (benchmarks/virtual_tasks.py).
"""

from __future__ import annotations

import math

__all__ = [
    "bucket_factor",
    "efficient_count",
    "efficient_counts",
    "fleet_capacity",
    "max_partitions_per_worker",
    "workers_for_rate",
]


def max_partitions_per_worker(workers: int, partitions: int) -> int:
    """Partitions held by the most loaded worker (at least 1 once there are more workers)."""
    if workers <= 0:
        return 0
    return max(1, math.ceil(partitions / workers))


def fleet_capacity(workers: int, partitions: int, worker_rate: float, max_factor: int = 1) -> float:
    """Highest input rate (msg/s) the fleet sustains without lag on its most loaded worker.

    A worker holding q of T tasks keeps up while q * (rate / T) <= worker_rate, so the fleet
    keeps up to worker_rate * T / q; workers beyond T hold nothing and add nothing. T is the
    partitions times the key-bucket factor the coordinator picks for this many workers
    (:func:`bucket_factor`; 1 when ``max_factor`` is 1).
    """
    if workers <= 0 or worker_rate <= 0:
        return 0.0
    if partitions <= 0:
        return workers * worker_rate
    tasks = partitions * bucket_factor(workers, partitions, max_factor)
    return worker_rate * tasks / max_partitions_per_worker(workers, tasks)


def bucket_factor(workers: int, partitions: int, max_factor: int = 1) -> int:
    """The smallest power-of-two key-bucket factor up to ``max_factor`` that gives ``workers``
    the most capacity over ``partitions * factor`` tasks (every split moves state and makes
    another reader of the partition, so a finer factor must buy capacity)."""
    if workers <= 0 or partitions <= 0:
        return 1
    best, best_tasks = 1, partitions / max_partitions_per_worker(workers, partitions)
    factor = 2
    while factor <= max_factor:
        tasks = partitions * factor
        capacity = tasks / max_partitions_per_worker(workers, tasks)
        if capacity > best_tasks + 1e-9:
            best, best_tasks = factor, capacity
        factor *= 2
    return best


def efficient_count(workers: int, partitions: int, max_factor: int = 1) -> int:
    """Smallest worker count with the same capacity as `workers` (25 -> 24 over 288 partitions,
    but 25 over 288 partitions split in two).

    Any count in between pays for workers that only take load off the less loaded ones.
    """
    if workers <= 0 or partitions <= 0:
        return max(0, workers)
    workers = min(workers, partitions * max_factor)
    if max_factor == 1:
        return math.ceil(partitions / max_partitions_per_worker(workers, partitions))
    wanted = fleet_capacity(workers, partitions, 1.0, max_factor) - 1e-9
    lo, hi = 1, workers  # capacity never falls as workers are added: the first that has it
    while lo < hi:
        mid = (lo + hi) // 2
        if fleet_capacity(mid, partitions, 1.0, max_factor) >= wanted:
            hi = mid
        else:
            lo = mid + 1
    return lo


def efficient_counts(
    partitions: int, lo: int = 1, hi: int | None = None, max_factor: int = 1
) -> list[int]:
    """Every efficient worker count in [lo, hi], ascending."""
    top = partitions * max_factor
    hi = top if hi is None else min(hi, top)
    return sorted(
        {efficient_count(w, partitions, max_factor) for w in range(max(lo, 1), hi + 1)} - {0}
    )


def workers_for_rate(
    rate: float, partitions: int, worker_rate: float, max_workers: int, max_factor: int = 1
) -> int:
    """Fewest workers whose capacity covers `rate` (capped at `max_workers`)."""
    if rate <= 0:
        return 1
    if partitions <= 0:
        return min(max_workers, max(1, math.ceil(rate / worker_rate)))
    if max_factor == 1:
        q = math.floor(worker_rate * partitions / rate + 1e-9)
        if q < 1:
            return min(max_workers, partitions)
        return min(max_workers, max(1, math.ceil(partitions / q)))
    top = min(max_workers, partitions * max_factor)
    if fleet_capacity(top, partitions, worker_rate, max_factor) < rate:
        return top
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        if fleet_capacity(mid, partitions, worker_rate, max_factor) >= rate * (1 - 1e-12):
            hi = mid
        else:
            lo = mid + 1
    return lo
