"""Uneven partition load: what W workers over P partitions can really process.

Partitions are the unit of assignment, so with 288 partitions and 29 workers some workers hold
10 partitions and others 9; traffic is spread evenly over partitions, so the most loaded
worker saturates first and its partitions lag first. The fleet's sustainable input rate is
therefore P / ceil(P / W) partitions' worth of one worker's rate, not W times it.
"""

from __future__ import annotations

import math

__all__ = [
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


def fleet_capacity(workers: int, partitions: int, worker_rate: float) -> float:
    """Highest input rate (msg/s) the fleet sustains without lag on its most loaded worker.

    A worker holding q partitions keeps up while q * (rate / P) <= worker_rate, so the
    fleet keeps up to worker_rate * P / q; workers beyond P hold nothing and add nothing.
    """
    if workers <= 0 or worker_rate <= 0:
        return 0.0
    if partitions <= 0:
        return workers * worker_rate
    return worker_rate * partitions / max_partitions_per_worker(workers, partitions)


def efficient_count(workers: int, partitions: int) -> int:
    """Smallest worker count with the same capacity as `workers` (25 -> 24 over 288 partitions).

    Any count in between pays for workers that only take load off the less loaded ones.
    """
    if workers <= 0 or partitions <= 0:
        return max(0, workers)
    workers = min(workers, partitions)
    return math.ceil(partitions / max_partitions_per_worker(workers, partitions))


def efficient_counts(partitions: int, lo: int = 1, hi: int | None = None) -> list[int]:
    """Every efficient worker count in [lo, hi], ascending."""
    hi = partitions if hi is None else min(hi, partitions)
    return sorted({efficient_count(w, partitions) for w in range(max(lo, 1), hi + 1)} - {0})


def workers_for_rate(rate: float, partitions: int, worker_rate: float, max_workers: int) -> int:
    """Fewest workers whose capacity covers `rate` (capped at `max_workers`)."""
    if rate <= 0:
        return 1
    q = math.floor(worker_rate * partitions / rate + 1e-9) if partitions > 0 else 0
    if partitions <= 0:
        return min(max_workers, max(1, math.ceil(rate / worker_rate)))
    if q < 1:
        return min(max_workers, partitions)
    return min(max_workers, max(1, math.ceil(partitions / q)))
