"""What a rescale pauses, from what the fleet measured: the planner's and the simulator's price.

A rescale does not stop the whole fleet: the coordinator moves only the tasks the new count needs
moved (:func:`tasks_moved`), and each moved task stands still while its owner checkpoints it,
releases it and its new owner restores it (the coordinator plans every hand-off of a rebalance at
once, so they overlap). So the processing a rescale loses is the moved tasks' pause: ``per_task_s``
each plus ``per_state_mb_s`` per megabyte of window state they carry. The coordinator records every
rescale (:mod:`orchestration.control_plane.fleet.rescales`); with enough records, :func:`fit_pause`
replaces the documented defaults by a non-negative least squares fit of the recorded lost
task-seconds on tasks moved and state moved.

The planner sees a rescale's loss as seconds of the whole fleet standing still
(:func:`rescale_loss_s`): moved tasks x their pause / all tasks, and for a scale-up the share of
capacity it adds times how long its new workers take to start. With key buckets, a rescale
that changes the partitions' bucket factor also splits or merges them, one factor step at a
time, and each step stops every task once (:func:`rebucketing_steps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestration.control_plane.autoscaling.capacity import bucket_factor
from orchestration.control_plane.autoscaling.config import AutoscaleSettings, FleetSettings
from pipelines.control import RescaleRecord

__all__ = [
    "PauseModel",
    "fit_pause",
    "fleet_pause_s",
    "rebucketing_steps",
    "rescale_loss_s",
    "tasks_moved",
    "with_measured_pause",
]


def tasks_moved(old: int | np.ndarray, new: int | np.ndarray, partitions: int) -> np.ndarray:
    """Tasks the coordinator moves to go from ``old`` to ``new`` workers.

    It keeps every task it can where it is: going up, the new workers take their even share
    (``partitions x added / new``); going down, the leaving workers' tasks move
    (``partitions x removed / old``). Rounded up, and never more than all tasks.
    """
    old_a = np.asarray(old, dtype=float)
    new_a = np.asarray(new, dtype=float)
    top = np.maximum(np.maximum(old_a, new_a), 1.0)
    moved = np.ceil(partitions * np.abs(new_a - old_a) / top - 1e-9)
    return np.minimum(moved, partitions)


def fleet_pause_s(
    old: int | np.ndarray, new: int | np.ndarray, partitions: int, task_pause_s: float
) -> np.ndarray:
    """The moved tasks' pause as seconds of the whole fleet standing still."""
    return tasks_moved(old, new, partitions) * task_pause_s / max(partitions, 1)


def rebucketing_steps(
    old: int | np.ndarray, new: int | np.ndarray, partitions: int, max_factor: int = 1
) -> np.ndarray:
    """Split or merge steps between the bucket factors the coordinator picks for ``old`` and for
    ``new`` workers (:func:`~orchestration.control_plane.autoscaling.capacity.bucket_factor`)."""
    old_a = np.asarray(old, dtype=int)
    new_a = np.asarray(new, dtype=int)
    if max_factor <= 1:
        return np.zeros(np.broadcast(old_a, new_a).shape)
    top = int(max(old_a.max(), new_a.max(), 0))
    levels = np.log2([bucket_factor(w, partitions, max_factor) for w in range(top + 1)])
    return np.abs(levels[np.maximum(new_a, 0)] - levels[np.maximum(old_a, 0)])


def rescale_loss_s(
    old: int | np.ndarray,
    new: int | np.ndarray,
    partitions: int,
    task_pause_s: float,
    start_s: float = 0.0,
    max_factor: int = 1,
) -> np.ndarray:
    """Everything a rescale from ``old`` to ``new`` workers loses, as seconds of the new
    fleet's work: the moved tasks' pause (they are handed over in parallel), every task's
    pause once per split or merge step it takes (``max_factor`` > 1), and, going up, the
    capacity it adds, missing until the new workers have started (``start_s``)."""
    old_a = np.maximum(np.asarray(old, dtype=float), 1.0)
    new_a = np.maximum(np.asarray(new, dtype=float), 1.0)
    share = 1.0 - np.ceil(partitions / new_a - 1e-9) / np.ceil(partitions / old_a - 1e-9)
    added = np.where(new_a > old_a, np.maximum(share, 0.0), 0.0)
    steps = rebucketing_steps(old, new, partitions, max_factor)
    return (
        fleet_pause_s(old, new, partitions, task_pause_s) + steps * task_pause_s + added * start_s
    )


@dataclass(frozen=True)
class PauseModel:
    """How long a moved task stands still: a fixed part and a part per MB of its state."""

    per_task_s: float
    per_state_mb_s: float
    rescales: int = 0
    """How many recorded rescales it was fitted from (0: the configured default)."""

    @classmethod
    def from_settings(cls, fleet: FleetSettings) -> PauseModel:
        return cls(fleet.move_pause_s, fleet.move_pause_per_state_mb_s)

    def task_pause_s(self, state_mb: float) -> float:
        """The pause of one moved task carrying ``state_mb`` MB of window state."""
        return self.per_task_s + self.per_state_mb_s * max(state_mb, 0.0)

    def describe(self) -> str:
        source = (
            f"fitted from {self.rescales} rescales" if self.rescales else "the configured default"
        )
        return f"{self.per_task_s:.2f} s per moved task + {self.per_state_mb_s:.3f} s/MB ({source})"


def fit_pause(
    records: Sequence[RescaleRecord], default: PauseModel, min_records: int
) -> PauseModel:
    """The pause fitted from ``records`` (lost task-seconds on tasks and MB moved, both
    coefficients non-negative), or ``default`` while there are fewer than ``min_records``
    records that moved a task."""
    usable = [r for r in records if r.tasks_moved > 0]
    if len(usable) < max(min_records, 1):
        return default
    # scipy costs ~1 s of CPU to import: not in every Dagster run worker that never fits
    from scipy.optimize import nnls

    x = np.array([[r.tasks_moved, r.state_mb] for r in usable], dtype=float)
    y = np.array([r.task_pause_s for r in usable], dtype=float)
    (per_task, per_mb), _ = nnls(x, y)
    return PauseModel(float(per_task), float(per_mb), len(usable))


def with_measured_pause(
    settings: AutoscaleSettings, records: Sequence[RescaleRecord], state_bytes: Sequence[int]
) -> tuple[AutoscaleSettings, PauseModel]:
    """``settings`` with the fleet's pause fitted from ``records`` (the configured one until
    there are enough) and its state per task from what the tasks report; and the model used."""
    fleet = settings.fleet
    model = fit_pause(records, PauseModel.from_settings(fleet), fleet.pause_fit_min_rescales)
    state_mb = sum(state_bytes) / len(state_bytes) / 1e6 if state_bytes else None
    updated = settings.updated(
        fleet={
            "move_pause_s": model.per_task_s,
            "move_pause_per_state_mb_s": model.per_state_mb_s,
            "state_mb_per_task": state_mb,
        }
    )
    return updated, model
