"""The exact programme over arrivals known in advance: the cheapest schedule of worker counts
that keeps the lag within the SLA at every tick, on the simulator's model
(:mod:`orchestration.control_plane.autoscaling.fleet_model`).

The offline optimum (:mod:`orchestration.control_plane.autoscaling.evaluation.optimum`) runs it over
a whole trace; the `horizon` policy runs it over the forecast horizon at every decision. A state is
the worker count running in a step (and, for an exact budget, the rescales used so far); what it
carries is the set of Pareto labels (cost so far, messages processed so far): of two ways to reach a
state, one that cost no more and processed no less dominates, since more processed never makes a
later tick's lag worse. Every label is extended by every count, and any tick whose oldest waiting
message is older than the SLA drops the extension.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestration.control_plane.autoscaling.capacity import efficient_counts
from orchestration.control_plane.autoscaling.config import FleetSettings
from orchestration.control_plane.autoscaling.exceptions import InvalidFleetParameter, NoFeasiblePlan
from orchestration.control_plane.autoscaling.fleet_model import FleetModel, processed

__all__ = ["ArrivalModel", "OptimumPlan", "cheapest_schedule", "forecast_model", "horizon_plan"]


@dataclass(frozen=True)
class OptimumPlan:
    """One schedule the programme found: a worker count per decision step."""

    schedule: tuple[int, ...]
    worker_steps: int
    rescales: int
    lam: float = 0.0
    """The price of a rescale (worker-steps) it was found at (0: the exact programme)."""

    def worker_hours(self, step_s: float) -> float:
        return self.worker_steps * step_s / 3600.0


class ArrivalModel:
    """The arrivals on the tick grid and the per-count constants the programme reuses."""

    def __init__(
        self,
        fleet: FleetModel,
        counts: Sequence[int],
        start: int,
        arrived: np.ndarray,
        sla_floor: np.ndarray,
        step_s: float,
        ticks: int,
        name: str,
    ) -> None:
        self.arrived = arrived
        self.sla_floor = sla_floor
        """Per tick: what must have been processed by then for the SLA to hold (FIFO)."""
        self.step_s = step_s
        self.ticks = ticks
        self.tick_s = step_s / ticks
        self.steps = (len(arrived) - 1) // ticks
        self.name = name
        self.counts = np.array(sorted(set(counts) | {start}), dtype=np.int64)
        self.start = int(np.searchsorted(self.counts, start))
        self.caps = np.array([fleet.capacity(int(w)) for w in self.counts])
        c = self.counts
        self.loss = np.asarray(fleet.rescale_loss_s(c[:, None], c[None, :]), dtype=float)
        np.fill_diagonal(self.loss, 0.0)
        if self.loss.max() > step_s:
            # the simulator carries a pause longer than a step into the next one; the
            # programme's state does not
            raise InvalidFleetParameter(
                f"a rescale loses up to {self.loss.max():.0f} s, more than a decision step "
                f"({step_s:.0f} s): the programme needs a longer step"
            )
        rel = np.arange(1, ticks + 1) * self.tick_s
        # [old, new, tick]: seconds the new fleet has worked by each tick of the step
        self.tau = np.maximum(rel[None, None, :] - self.loss[:, :, None], 0.0)
        self.served = np.broadcast_to(self.caps[None, :, None], self.tau.shape) * self.tau
        """[old, new, tick]: what the new fleet can serve by each tick of a step."""
        self.per_worker_price = 0.0
        """Worker-steps a rescale costs per worker of the new count, on top of lambda."""

    def step(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Step ``k`` for every (old, new) pair: what the new fleet serves by each tick, and what it
        has processed by each tick had everything before the step been processed
        (:func:`~orchestration.control_plane.autoscaling.fleet_model.processed` from ``inf``). From
        ``x`` processed at the start, it has processed ``min(x + served, free)``."""
        arr = self.arrived[k * self.ticks + 1 : (k + 1) * self.ticks + 1]
        return self.served, processed(np.inf, arr[None, None, :], self.served)

    def backlog(self, schedule: Sequence[int]) -> np.ndarray:
        """The backlog at the end of each step of ``schedule`` (counts among ``counts``), from
        ``start`` with nothing processed: the programme's own projection of a schedule."""
        index = {int(c): i for i, c in enumerate(self.counts)}
        old = self.start
        done = 0.0
        out = []
        for k, count in enumerate(schedule):
            new = index[int(count)]
            served, free = self.step(k)
            end = float(self.arrived[(k + 1) * self.ticks])
            done = min(done + served[old, new, -1], free[old, new, -1], end)
            out.append(end - done)
            old = new
        return np.array(out)


def _prune(key: np.ndarray, cost: np.ndarray, backlog: np.ndarray) -> np.ndarray:
    """Indices of the labels no other label of the same key dominates (costs no more and
    left no more backlog, i.e. processed no less), one per tie."""
    top = float(cost.max()) + 1.0
    order = np.lexsort((backlog, key * top + cost))
    span = 2.0 * float(backlog.max()) + 1.0
    v = key[order] * span - backlog[order]
    before = np.concatenate(([-np.inf], np.maximum.accumulate(v)[:-1]))
    return order[v > before]


def cheapest_schedule(
    model: ArrivalModel,
    lam: float,
    budget: int | None,
) -> tuple[OptimumPlan, float]:
    """One pass: the cheapest schedule with cost = worker-steps + lam x rescales (budget None),
    or with worker-steps alone and at most ``budget`` rescales; and its cost.

    Within a step at count ``new`` after a move from ``old``, a label that processed ``x``
    messages has processed ``min(x + served_t, free_t)`` by tick t (:meth:`ArrivalModel.step`):
    the SLA holds at every tick exactly when ``x`` is at least ``max_t(floor_t - served_t)``
    and ``free_t`` never falls below the floor. Both are worked out once per (old, new) pair,
    so each label costs a few scalar operations per count rather than a pass over the ticks.
    """
    n = len(model.counts)
    ticks = model.ticks
    arrived = model.arrived
    # labels of the current step: count index, rescales, cost, processed
    b = np.array([model.start], dtype=np.int64)
    r = np.zeros(1, dtype=np.int64)
    cost = np.zeros(1)
    done = np.zeros(1)
    parents: list[tuple[np.ndarray, np.ndarray]] = []
    counts = model.counts.astype(float)
    cols = np.arange(n)
    for k in range(model.steps):
        i0 = k * ticks
        arr = arrived[i0 + 1 : i0 + ticks + 1]
        floor = model.sla_floor[i0 + 1 : i0 + ticks + 1]
        served, free = model.step(k)
        need = (floor[None, None, :] - served).max(axis=2)  # least x that keeps the SLA
        broken = (free < floor[None, None, :]).any(axis=2)
        end_served, end_free = served[:, :, -1], free[:, :, -1]
        # every label x every count
        m = b.size
        src = np.repeat(np.arange(m), n)
        new = np.tile(cols, m)
        old = b[src]
        x = done[src]
        ok = (x >= need[old, new]) & ~broken[old, new]
        moved = (old != new).astype(np.int64)
        r2 = r[src] + moved
        if budget is not None:
            ok &= r2 <= budget
        if not ok.any():
            raise NoFeasiblePlan(
                f"no worker count keeps the lag within the SLA at step {k} "
                f"(t={k * model.step_s:.0f} s) of {model.name}"
            )
        rows = np.flatnonzero(ok)
        o, w = old[rows], new[rows]
        d2 = np.minimum(np.minimum(x[rows] + end_served[o, w], end_free[o, w]), arr[-1])
        c2 = cost[src[rows]] + counts[w] + moved[rows] * (lam + model.per_worker_price * counts[w])
        key = w if budget is None else w * (budget + 1) + r2[rows]
        keep = _prune(key, c2, arr[-1] - d2)
        rows = rows[keep]
        parents.append((src[rows], new[rows]))
        b, r, cost, done = new[rows], r2[rows], c2[keep], d2[keep]
    best = int(np.lexsort((r, cost))[0])
    schedule = []
    i = best
    for src_k, new_k in reversed(parents):
        schedule.append(int(model.counts[new_k[i]]))
        i = int(src_k[i])
    schedule.reverse()
    start = int(model.counts[model.start])
    rescales = sum(a != c for a, c in zip([start, *schedule], schedule, strict=False))
    return OptimumPlan(tuple(schedule), int(sum(schedule)), rescales, lam), float(cost[best])


def forecast_model(
    fleet: FleetSettings | FleetModel,
    workers: int,
    backlog: float,
    time_lag_s: float,
    rates: Sequence[float],
    step_s: float,
    sla_s: float,
    counts: Sequence[int] | None = None,
    ticks_per_step: int = 10,
) -> ArrivalModel:
    """The programme's model of a forecast horizon: ``backlog`` waiting (the oldest
    ``time_lag_s`` old, the rest arrived evenly since), then the forecast ``rates`` (msg/s per
    step), each constant over its step, with the SLA ``sla_s`` held at every tick; counts
    among ``counts`` (default: the efficient ones up to the one carrying twice the peak)."""
    model = fleet if isinstance(fleet, FleetModel) else FleetModel.from_settings(fleet)
    rates_a = np.maximum(np.nan_to_num(np.asarray(rates, dtype=float)), 0.0)
    tick_s = step_s / ticks_per_step
    per_tick = np.repeat(rates_a, ticks_per_step) * tick_s
    backlog = max(float(backlog), 0.0)
    arrived = backlog + np.concatenate(([0.0], np.cumsum(per_tick)))
    t = np.arange(arrived.size) * tick_s
    lag = max(float(time_lag_s) if math.isfinite(time_lag_s) else 0.0, tick_s)
    due = t - sla_s  # a message that arrived before this is late at t
    before = np.clip((due + lag) / lag, 0.0, 1.0) * backlog  # the backlog, arrived evenly
    floor = np.where(due < 0, np.where(due < -lag, -np.inf, before), np.interp(due, t, arrived))
    if counts is None:
        peak = float(rates_a.max()) if rates_a.size else 0.0
        top = model.workers_for(2.0 * max(peak, backlog / max(sla_s, 1.0)))
        counts = efficient_counts(
            model.partitions, model.min_workers, max(top, workers), model.max_factor
        )
    return ArrivalModel(model, counts, workers, arrived, floor, step_s, ticks_per_step, "forecast")


def horizon_plan(
    fleet: FleetSettings | FleetModel,
    workers: int,
    backlog: float,
    time_lag_s: float,
    rates: Sequence[float],
    step_s: float,
    sla_s: float,
    rescale_price: float,
    rescale_price_per_worker: float = 0.0,
    counts: Sequence[int] | None = None,
    ticks_per_step: int = 10,
) -> OptimumPlan:
    """The optimum's programme over a forecast horizon, for a planner: the cheapest schedule
    from ``workers`` on :func:`forecast_model`'s horizon, a rescale priced ``rescale_price``
    plus ``rescale_price_per_worker`` x the new count (worker-steps) on top of the capacity
    its pause and start lose.

    Raises NoFeasiblePlan where no count keeps the SLA under the forecast.
    """
    model = forecast_model(
        fleet, workers, backlog, time_lag_s, rates, step_s, sla_s, counts, ticks_per_step
    )
    model.per_worker_price = rescale_price_per_worker
    return cheapest_schedule(model, rescale_price, None)[0]
