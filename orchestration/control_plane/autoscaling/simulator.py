"""Replays a traffic trace against a policy: a fluid model of the fleet's backlog and lag.

The trace (timestamp,value) is scaled so its maximum is the peak rate and interpolated linearly
to a fine tick grid; arrivals do not depend on the policy, so they are integrated once. Each
decision step the simulated collector builds a `FleetMetrics` snapshot, the policy decides,
guards review, the `SimulatedRealizer` applies, and the fleet then processes for one step:

- the fleet is the one model the planners share (`fleet_model.FleetModel`): capacity is the
  uneven-partition capacity of the worker count (`capacity.fleet_capacity`): the most loaded
  worker's partitions lag first, and their lag is the fleet's lag;
- a rescale pauses the tasks it moves (`pause.tasks_moved`), each for the fleet's pause model
  (`move_pause_s` plus `move_pause_per_state_mb_s` x `state_mb_per_task`), and the capacity a
  scale-up adds arrives once its workers started (`scale_up_start_s`), and with key buckets
  (`max_bucket_factor`) a change of the partitions' bucket factor stops every task once per
  split or merge step: the fleet loses that work (`pause.rescale_loss_s`);
- the backlog carries over; processing within a step follows the fluid queue's exact (min,+)
  solution (`fleet_model.processed`) on the tick grid;
- time lag is the age of the oldest unprocessed message, from the arrival curve (FIFO).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.autoscaling.exceptions import (
    InvalidFleetParameter,
)
from orchestration.control_plane.autoscaling.fleet_model import FleetModel, processed
from orchestration.control_plane.autoscaling.metrics import FleetMetrics
from orchestration.control_plane.autoscaling.pause import tasks_moved
from orchestration.control_plane.autoscaling.policies import ScalingPolicy, make_policy
from orchestration.control_plane.autoscaling.realizers import SimulatedRealizer
from orchestration.control_plane.autoscaling.step import decide
from orchestration.control_plane.autoscaling.vetoes import Guard, default_guards
from pipelines.generator.trace import TRACES_DIR, Trace, load_trace, resolve_trace, shipped_traces

__all__ = [
    "TRACES_DIR",  # re-exported: the simulator replays the generator's traces
    "PolicySummary",
    "SimulationResult",
    "Simulator",
    "StepRecord",
    "Trace",
    "load_trace",
    "resolve_trace",
    "shipped_traces",
    "simulate",
    "summarise",
]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One decision step: the state at its end and what was decided at its start."""

    time: float
    workers: int
    input_rate: float
    processing_rate: float
    backlog: float
    time_lag: float
    max_time_lag: float
    violation_s: float
    utilisation: float
    decision_s: float
    rescaled: bool
    reason: str
    interruptions: int = 0
    """Spot interruptions in the step (each moves one worker's tasks)."""
    tasks_moved: int = 0
    paused_s: float = 0.0
    """Seconds of the step the fleet stood still: a rescale's pause, tasks moving."""


@dataclass(frozen=True)
class PolicySummary:
    """The figures the report prints for one policy on one trace."""

    policy: str
    trace: str
    worker_hours: float
    savings_vs_static: float
    mean_utilisation: float
    sla_violation_minutes: float
    max_lag_s: float
    rescales: int
    rescales_per_day: float
    """Rescales over the replayed days: the churn a fleet's users see."""
    pause_minutes: float
    """Minutes the fleet stood still (rescale pauses and moved tasks)."""
    decision_mean_ms: float
    decision_p99_ms: float
    mean_workers: float
    max_workers: int
    cost_dollars: float = 0.0
    """Worker-hours at the configured mix of spot and on-demand prices."""
    on_demand_cost_dollars: float = 0.0
    """The same worker-hours, all on demand."""
    interruptions: int = 0
    tasks_moved: int = 0

    def as_dict(self) -> dict[str, float | int | str]:
        return dict(self.__dict__)


@dataclass
class SimulationResult:
    policy: str
    trace: str
    step_s: float
    worker_rate: float
    records: list[StepRecord] = field(default_factory=list)
    hour_price: float = 0.0
    """$ per worker-hour at the configured spot share."""
    on_demand_hour_price: float = 0.0

    def arrays(self) -> dict[str, np.ndarray]:
        names = ("time", "workers", "input_rate", "backlog", "time_lag", "max_time_lag")
        return {n: np.array([getattr(r, n) for r in self.records], dtype=float) for n in names}

    def summary(self, static_worker_hours: float | None = None) -> PolicySummary:
        recs = self.records
        dt = self.step_s
        workers = np.array([r.workers for r in recs], dtype=float)
        worker_hours = float(workers.sum() * dt / 3600.0)
        processed = sum(r.processing_rate * dt for r in recs)
        capacity = float(workers.sum() * dt * self.worker_rate)
        decisions = np.array([r.decision_s for r in recs]) * 1000.0
        base = static_worker_hours if static_worker_hours is not None else worker_hours
        days = len(recs) * dt / 86400.0
        rescales = sum(r.rescaled for r in recs)
        return PolicySummary(
            policy=self.policy,
            trace=self.trace,
            worker_hours=worker_hours,
            savings_vs_static=base / worker_hours if worker_hours > 0 else math.nan,
            mean_utilisation=processed / capacity if capacity > 0 else math.nan,
            sla_violation_minutes=sum(r.violation_s for r in recs) / 60.0,
            max_lag_s=max((r.max_time_lag for r in recs), default=0.0),
            rescales=rescales,
            rescales_per_day=rescales / days if days > 0 else 0.0,
            pause_minutes=sum(r.paused_s for r in recs) / 60.0,
            decision_mean_ms=float(decisions.mean()) if decisions.size else 0.0,
            decision_p99_ms=float(np.percentile(decisions, 99)) if decisions.size else 0.0,
            mean_workers=float(workers.mean()) if workers.size else 0.0,
            max_workers=int(workers.max()) if workers.size else 0,
            cost_dollars=worker_hours * self.hour_price,
            on_demand_cost_dollars=worker_hours * self.on_demand_hour_price,
            interruptions=sum(r.interruptions for r in recs),
            tasks_moved=sum(r.tasks_moved for r in recs),
        )


class Simulator:
    """Replays one (scaled, cut) trace; `run` is pure apart from timing the decisions."""

    def __init__(self, trace: Trace, settings: AutoscaleSettings) -> None:
        sim, fleet = settings.simulation, settings.fleet
        for name, value in (
            ("peak rate", sim.peak_rate),
            ("worker rate", fleet.worker_rate),
            ("SLA", sim.sla_s),
            ("step", sim.step_s),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise InvalidFleetParameter(f"{name} must be a positive number, got {value}")
        if fleet.partitions < 1:
            raise InvalidFleetParameter(f"partitions must be >= 1, got {fleet.partitions}")
        self.settings = settings
        self.model = FleetModel.from_settings(fleet)
        self.trace = trace.cut(sim.days).scaled(sim.peak_rate)
        self.step_s = sim.step_s
        ticks = max(1, round(sim.step_s / sim.tick_s))
        self.ticks_per_step = ticks
        self.tick_s = sim.step_s / ticks
        self.steps = max(1, int(self.trace.duration_s // self.step_s))
        n = self.steps * ticks
        self.t = np.arange(n + 1) * self.tick_s
        rate = self.trace.rate_at(self.t)
        self.rate = rate
        # cumulative arrivals at tick ends (trapezoids of the interpolated rate)
        self.arrived = np.concatenate(
            ([0.0], np.cumsum((rate[1:] + rate[:-1]) * 0.5 * self.tick_s))
        )

    def _interruptions(self, workers: int, step: int, rng: np.random.Generator) -> int:
        """Spot interruptions during ``step`` with ``workers`` running: from the recorded
        list, or drawn at the configured rate for the spot share of the workers."""
        spot = self.settings.spot
        if spot.spot_share <= 0 or workers <= 0:
            return 0
        if spot.interruption_times_s is not None:
            start, end = step * self.step_s, (step + 1) * self.step_s
            return sum(start <= t < end for t in spot.interruption_times_s)
        expected = spot.interruptions_per_worker_day * workers * spot.spot_share
        return int(rng.poisson(expected * self.step_s / 86_400.0))

    def initial_workers(self, policy: ScalingPolicy) -> int:
        """Static starts at its count; others at what covers the first rate with 20% room."""
        if getattr(policy, "name", "") == "static" and hasattr(policy, "workers"):
            return int(policy.workers)  # type: ignore[attr-defined]
        first = float(self.rate[: self.ticks_per_step + 1].mean())
        return max(self.model.min_workers, self.model.workers_for(first * 1.2))

    def _lag(self, t_idx: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Age of the oldest unprocessed message at ticks `t_idx` given processed counts."""
        arrived = self.arrived
        backlog = arrived[t_idx] - done
        lag = np.zeros_like(done)
        waiting = backlog > 1e-6 * np.maximum(arrived[t_idx], 1.0)
        if waiting.any():
            d = done[waiting]
            i = np.searchsorted(arrived, d, side="right")
            i = np.clip(i, 1, len(arrived) - 1)
            a0, a1 = arrived[i - 1], arrived[i]
            frac = np.where(a1 > a0, (d - a0) / np.where(a1 > a0, a1 - a0, 1.0), 0.0)
            born = self.t[i - 1] + frac * self.tick_s
            lag[waiting] = np.maximum(self.t[t_idx[waiting]] - born, 0.0)
        return lag

    def run(
        self,
        policy: ScalingPolicy,
        guards: Sequence[Guard] | None = None,
        realizer: SimulatedRealizer | None = None,
    ) -> SimulationResult:
        s = self.settings
        fleet, sla = s.fleet, s.simulation.sla_s
        guards = default_guards(s) if guards is None else guards
        now = 0.0
        if realizer is None:
            realizer = SimulatedRealizer(self.initial_workers(policy), clock=lambda: now)
        spot = s.spot
        result = SimulationResult(
            policy.name,
            self.trace.name,
            self.step_s,
            fleet.worker_rate,
            hour_price=spot.spot_share * spot.spot_hour_price
            + (1 - spot.spot_share) * spot.on_demand_hour_price,
            on_demand_hour_price=spot.on_demand_hour_price,
        )
        rng = np.random.default_rng(spot.seed)
        history: list[FleetMetrics] = []
        done = 0.0  # messages processed so far
        pause_left = 0.0
        model = self.model
        last_rescale: float | None = None
        prev_backlog = 0.0
        prev_done = 0.0
        prev_workers = realizer.current()
        ticks, dt = self.ticks_per_step, self.tick_s
        lag_now = 0.0
        for k in range(self.steps):
            i0 = k * ticks
            now = float(self.t[i0])
            arrived_now = float(self.arrived[i0])
            backlog = arrived_now - done
            if k == 0:
                metrics = FleetMetrics(
                    time=now,
                    workers=prev_workers,
                    partitions=fleet.partitions,
                    input_rate=float(self.rate[0]),
                    processing_rate=float(self.rate[0]),
                    true_processing_rate=fleet.worker_rate,
                    utilisation=min(1.0, float(self.rate[0]) / (prev_workers * fleet.worker_rate)),
                    backlog=0.0,
                    backlog_growth=0.0,
                    time_lag=0.0,
                )
            else:
                worked = done - prev_done
                busy = worked / fleet.worker_rate  # worker-seconds busy
                metrics = FleetMetrics(
                    time=now,
                    workers=prev_workers,
                    partitions=fleet.partitions,
                    input_rate=(arrived_now - float(self.arrived[i0 - ticks])) / self.step_s,
                    processing_rate=worked / self.step_s,
                    true_processing_rate=worked / busy if busy > 0 else math.nan,
                    utilisation=min(1.0, busy / (prev_workers * self.step_s))
                    if prev_workers
                    else math.nan,
                    backlog=backlog,
                    backlog_growth=(backlog - prev_backlog) / self.step_s,
                    time_lag=lag_now,
                )
            step = decide(policy, metrics, history, guards, last_rescale)
            history.append(metrics)
            decision, elapsed = step.decision, step.decision_s
            workers = realizer.current()
            rescaled = False
            moved = 0
            if decision.target != workers:
                before, workers = workers, realizer.apply(decision.target, decision.reason)
                rescaled = True
                last_rescale = now
                moved = int(tasks_moved(before, workers, fleet.partitions))
                pause_left = float(model.rescale_loss_s(before, workers))
            # spot interruptions: each moves one worker's tasks, which pause while they move
            interruptions = self._interruptions(workers, k, rng)
            moved += interruptions * math.ceil(fleet.partitions / max(workers, 1))
            if interruptions:
                pause_left += interruptions * spot.task_move_pause_s / max(workers, 1)
            # process one step on the tick grid
            cap = model.capacity(workers)
            rel = np.arange(1, ticks + 1) * dt
            tau = np.maximum(rel - pause_left, 0.0)
            paused = min(pause_left, self.step_s)
            idx = np.arange(i0 + 1, i0 + ticks + 1)
            arr = self.arrived[idx]
            done_ticks = np.minimum(processed(done, arr, cap * tau), arr)
            lags = self._lag(idx, done_ticks)
            pause_left = max(0.0, pause_left - self.step_s)
            prev_backlog, prev_done, prev_workers = backlog, done, workers
            done = float(done_ticks[-1])
            lag_now = float(lags[-1])
            result.records.append(
                StepRecord(
                    time=now + self.step_s,
                    workers=workers,
                    input_rate=(float(arr[-1]) - arrived_now) / self.step_s,
                    processing_rate=(done - prev_done) / self.step_s,
                    backlog=float(arr[-1]) - done,
                    time_lag=lag_now,
                    max_time_lag=float(lags.max()),
                    violation_s=float((lags > sla).sum() * dt),
                    utilisation=(done - prev_done) / (workers * fleet.worker_rate * self.step_s),
                    decision_s=elapsed,
                    rescaled=rescaled,
                    reason=decision.reason,
                    interruptions=interruptions,
                    tasks_moved=moved,
                    paused_s=paused,
                )
            )
        return result


def simulate(
    trace: Trace, policies: Sequence[str], settings: AutoscaleSettings
) -> list[SimulationResult]:
    """Run each named policy on the trace (fresh policy instances, same simulator)."""
    sim = Simulator(trace, settings)
    return [sim.run(make_policy(name, settings)) for name in policies]


def summarise(results: Sequence[SimulationResult]) -> list[PolicySummary]:
    """Summaries with savings against the `static` run (if present in `results`)."""
    static = next((r for r in results if r.policy == "static"), None)
    base = static.summary().worker_hours if static else None
    return [r.summary(base) for r in results]
