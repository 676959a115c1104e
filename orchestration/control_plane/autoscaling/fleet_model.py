"""The fleet as the simulator, the tree search and the horizon search see it.

:class:`FleetModel` says what a count of workers carries (the uneven-partition capacity,
:mod:`orchestration.control_plane.autoscaling.capacity`) and what a rescale between two counts loses
(:mod:`orchestration.control_plane.autoscaling.pause`). :func:`processed` says how the backlog
evolves over a step given the arrivals and what the fleet can serve: a FIFO fluid queue, where the
backlog at any point is what arrived less what was processed. The simulator replays a trace with
them, the tree search prices its plans with them and the horizon search projects its schedules with
them, so the three cannot drift apart (the test
``tests/orchestration/control_plane/autoscaling/test_autoscale_fleet_model.py`` feeds all three one
trace and compares their backlogs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from orchestration.control_plane.autoscaling.capacity import fleet_capacity, workers_for_rate
from orchestration.control_plane.autoscaling.config import FleetSettings
from orchestration.control_plane.autoscaling.pause import PauseModel, rescale_loss_s

__all__ = ["FleetModel", "processed"]


@dataclass(frozen=True)
class FleetModel:
    """What the fleet can do: its partitions, what one worker carries, what a rescale loses
    and the counts it may run."""

    partitions: int
    worker_rate: float
    """What one worker processes, msg per busy-second."""
    max_factor: int = 1
    """Most key buckets per partition: counts above the partitions carry more."""
    task_pause_s: float = 0.0
    """How long each task a rescale moves stands still, s."""
    scale_up_start_s: float = 0.0
    """How long a scale-up's new workers take to start taking tasks, s."""
    min_workers: int = 1
    max_workers: int | None = None

    @classmethod
    def from_settings(cls, fleet: FleetSettings) -> FleetModel:
        """The configured fleet, its pause at the configured state per task."""
        return cls(
            partitions=fleet.partitions,
            worker_rate=fleet.worker_rate,
            max_factor=fleet.max_bucket_factor,
            task_pause_s=PauseModel.from_settings(fleet).task_pause_s(fleet.state_mb_per_task),
            scale_up_start_s=fleet.scale_up_start_s,
            min_workers=fleet.min_workers,
            max_workers=fleet.max_workers,
        )

    @property
    def upper(self) -> int:
        """Most workers that hold a task (and no more than ``max_workers``)."""
        tasks = self.partitions * self.max_factor
        return min(self.max_workers or tasks, tasks)

    def capacity(self, workers: int) -> float:
        """Highest input rate (msg/s) ``workers`` sustain (the most loaded one decides)."""
        return fleet_capacity(workers, self.partitions, self.worker_rate, self.max_factor)

    def capacity_table(self, top: int) -> np.ndarray:
        """The capacity of every count from 0 to ``top`` (read-only, cached)."""
        return _capacity_table(top, self.partitions, self.worker_rate, self.max_factor)

    def workers_for(self, rate: float, top: int | None = None) -> int:
        """Fewest workers whose capacity covers ``rate`` (at most ``top``, default the upper
        bound)."""
        return workers_for_rate(
            rate,
            self.partitions,
            self.worker_rate,
            self.upper if top is None else top,
            self.max_factor,
        )

    def rescale_loss_s(self, old: int | np.ndarray, new: int | np.ndarray) -> np.ndarray:
        """What a rescale from ``old`` to ``new`` workers loses, as seconds of the new fleet's
        work (moved tasks' pause, bucket splits and merges, a scale-up's start)."""
        return rescale_loss_s(
            old, new, self.partitions, self.task_pause_s, self.scale_up_start_s, self.max_factor
        )

    def loss_table(self, top: int) -> np.ndarray:
        """[old, new] for counts up to ``top``: each rescale's loss (read-only, cached: it
        does not depend on the measured worker rate, so it outlives it)."""
        return _loss_table(
            top, self.partitions, self.task_pause_s, self.scale_up_start_s, self.max_factor
        )


@lru_cache(maxsize=64)
def _capacity_table(top: int, partitions: int, worker_rate: float, max_factor: int) -> np.ndarray:
    table = np.array(
        [fleet_capacity(w, partitions, worker_rate, max_factor) for w in range(top + 1)],
        dtype=float,
    )
    table.flags.writeable = False
    return table


@lru_cache(maxsize=16)
def _loss_table(
    top: int, partitions: int, task_pause_s: float, start_s: float, max_factor: int
) -> np.ndarray:
    counts = np.arange(top + 1)
    matrix = rescale_loss_s(
        counts[:, None], counts[None, :], partitions, task_pause_s, start_s, max_factor
    )
    matrix.flags.writeable = False
    return matrix


def processed(
    done0: float | np.ndarray, arrived: np.ndarray, served: float | np.ndarray
) -> np.ndarray:
    """Messages processed by each point of a step, on the fluid model of the backlog.

    ``arrived`` is the cumulative arrivals at each point (from any origin), ``served`` what the
    fleet can serve from the step's start to each point (its capacity times the time it
    worked), ``done0`` what was processed at the start, counted from the same origin as
    ``arrived``. The fleet serves first come, first served, and never more than has arrived:
    ``D(t) = S(t) + min(D0, min_{s <= t} A(s) - S(s))``, Lindley's recursion
    ``b <- max(b + a - c, 0)`` in closed form. The backlog at each point is ``arrived`` less it.

    Only ``arrived`` less ``served`` decides the backlog (shifting both by one curve shifts
    what is processed by it), so a model that adds up arrivals net of capacity, as the tree
    search does per plan step, passes those as ``arrived`` with nothing ``served``.

    Works along the last axis and broadcasts over the others. Since
    ``processed(d) == min(d + served, processed(inf))``, a search that extends many starts by
    the same step works the step out once, with ``done0 = inf``.
    """
    return served + np.minimum(done0, np.minimum.accumulate(arrived - served, axis=-1))
