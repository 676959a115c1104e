"""The job model: which worker runs which task (Samza's term).

Tasks are the partitions of the topic. Assigning them round-robin keeps each worker's share
within one task of every other's; when the worker count does not divide the partition count,
some workers carry one task more, which the autoscaler's capacity model accounts for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.stream import TaskId

__all__ = ["JobModel", "plan_job_model"]


@dataclass(frozen=True)
class JobModel:
    assignments: dict[str, tuple[TaskId, ...]]
    """Worker id -> its tasks."""

    @property
    def workers(self) -> list[str]:
        return sorted(self.assignments)

    def tasks_of(self, worker_id: str) -> tuple[TaskId, ...]:
        return self.assignments[worker_id]

    def describe(self) -> str:
        return "; ".join(
            f"{w}: {','.join(str(t.partition) for t in self.assignments[w])}" for w in self.workers
        )


def plan_job_model(tasks: Sequence[TaskId], workers: int) -> JobModel:
    """Spread ``tasks`` over ``workers`` (capped at one task per worker at least)."""
    if workers < 1:
        raise ValueError(f"need at least one worker, got {workers}")
    tasks = sorted(tasks)
    workers = min(workers, len(tasks))
    assignments: dict[str, list[TaskId]] = {f"w{i}": [] for i in range(workers)}
    for index, task in enumerate(tasks):
        assignments[f"w{index % workers}"].append(task)
    return JobModel({w: tuple(ts) for w, ts in assignments.items()})
