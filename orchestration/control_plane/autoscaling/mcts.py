"""The Metamarkets planner: a Monte-Carlo tree search over worker counts, minimising cost.

A node is "run n workers for a while"; the children of n are n, n+-1, n+-k, n+-k^2, ... within [min,
max] (the first step past a bound lands on it; plus the next capacity level up and down), and a node
at depth d lasts c*m^d, so the tree looks far ahead with few, coarse moves and near with many, fine
ones. Every new node is a leaf that keeps its count to the common horizon; its cost is hardware
(worker-hours, billed in a granularity) + SLA penalty (time with lag beyond the SLA, priced far
above hardware) + the cost of each rescale (a penalty plus the worker-hours its pause pays for
nothing; the backlog the pause leaves is in the fluid model), on the fleet's fluid model of the
backlog (:mod:`orchestration.control_plane.autoscaling.fleet_model`) under the forecast input rate.
A node's value is the minimum over its subtree, since the planner will pick the best continuation.

Fewer, better moves: the penalty is set per decision (the policy raises it while the fleet
rescales faster than its budget), no plan goes down below the count that carries the recent
mean rate (a floor the policy measures), a node reached by a rescale may have to dwell before
its children can go down (the dwell grows with the rescale's cost), and the first move can be
made to beat staying by a margin (hysteresis). Ups are never blocked: lag beyond the SLA costs
more than any rescale.

Worker counts are snapped to "efficient" counts (see `capacity.efficient_count`): with 288
partitions, 25 workers carry exactly what 24 carry, so 25 is never worth paying for.

Children of a node are expanded together and evaluated in one numpy batch; that is what keeps a
decision in milliseconds.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from orchestration.control_plane.autoscaling.capacity import efficient_count, efficient_counts
from orchestration.control_plane.autoscaling.config import MctsSettings
from orchestration.control_plane.autoscaling.fleet_model import FleetModel, processed

__all__ = [
    "CostModel",
    "CostSplit",
    "MctsPlanner",
    "Plan",
    "PlanSegment",
    "PlanningProblem",
    "efficient_levels",
    "sla_window_arrivals",
]


@dataclass(frozen=True)
class CostModel:
    """Prices of the planner's cost: hardware, SLA violation and rescales."""

    worker_hour_price: float = 1.0
    billing_granularity_s: float = 60.0
    sla_cost_per_minute: float = 50.0
    rescale_cost: float = 0.25
    """The fixed part of the penalty per rescale."""
    rescale_penalty_s: float = 900.0
    """The part of the penalty that grows with the fleet: seconds of the new fleet's work."""

    @classmethod
    def from_settings(cls, s: MctsSettings) -> CostModel:
        return cls(
            worker_hour_price=s.worker_hour_price,
            billing_granularity_s=s.billing_granularity_s,
            sla_cost_per_minute=s.sla_cost_per_minute,
            rescale_cost=s.rescale_cost,
            rescale_penalty_s=s.rescale_penalty_s,
        )

    def scaled(self, factor: float) -> CostModel:
        """The same prices with the rescale penalty multiplied by `factor`."""
        if factor == 1.0:
            return self
        return replace(
            self,
            rescale_cost=self.rescale_cost * factor,
            rescale_penalty_s=self.rescale_penalty_s * factor,
        )

    def per_worker_rescale(self, pause_s: float) -> float:
        """What one worker of the new fleet adds to a rescale's cost: the capacity the pause
        takes from it (real lost capacity) plus its share of the penalty."""
        return (pause_s + self.rescale_penalty_s) / 3600.0 * self.worker_hour_price

    def rescale(self, workers: int | np.ndarray, pause_s: float) -> float | np.ndarray:
        """Cost of one rescale to `workers`: the penalty (fixed, plus `rescale_penalty_s` of the
        new fleet's work, since stopping, handing over and restarting more tasks costs more)
        plus the worker-hours paid while the pause stops them all; the backlog the pause leaves
        is modelled apart."""
        return self.rescale_cost + workers * self.per_worker_rescale(pause_s)


@dataclass(frozen=True)
class PlanningProblem:
    """The state the planner starts from and the traffic it expects.

    `rates` is the expected mean input rate of each plan step; `sla_arrivals[j]` is how many
    messages arrive in the SLA window ending at the end of step j: the backlog then exceeds it
    exactly when the oldest waiting message is older than the SLA (FIFO).
    """

    workers: int
    partitions: int
    worker_rate: float
    backlog: float
    rates: np.ndarray
    sla_arrivals: np.ndarray
    step_s: float
    min_workers: int = 1
    max_workers: int | None = None
    task_pause_s: float = 2.0
    """How long each task a rescale moves stands still, s (`pause.PauseModel`)."""
    scale_up_start_s: float = 0.0
    """How long a scale-up's new workers take to start taking tasks, s. With the pause, a
    rescale from n to m loses `pause.rescale_loss_s(n, m, ...)` seconds of the new fleet's
    work."""
    dwell_left_s: float = 0.0
    """How long the current count must still hold before a scale-down: what is left of the
    dwell of the rescale that set it (0: the fleet may scale down now)."""
    penalty_factor: float = 1.0
    """How much the rescale penalty is raised for this decision (the policy's budget)."""
    down_floor: int = 0
    """No plan goes down below this count (or the current one, if lower): what carries the
    recent mean rate. A dip of a noisy rate is not a reason to rescale."""
    max_factor: int = 1
    """Most key buckets per partition: counts above the partitions carry more (capacity)."""

    @property
    def steps(self) -> int:
        return len(self.rates)

    @property
    def fleet(self) -> FleetModel:
        """The fleet this problem plans for, at the measured worker rate."""
        return FleetModel(
            partitions=self.partitions,
            worker_rate=self.worker_rate,
            max_factor=self.max_factor,
            task_pause_s=self.task_pause_s,
            scale_up_start_s=self.scale_up_start_s,
            min_workers=self.min_workers,
            max_workers=self.max_workers,
        )

    @property
    def upper(self) -> int:
        tasks = self.partitions * self.max_factor
        return min(self.max_workers or tasks, tasks)


@dataclass(frozen=True)
class PlanSegment:
    start_s: float
    duration_s: float
    workers: int


@dataclass(frozen=True)
class CostSplit:
    """A plan's predicted cost by what it pays for, in worker-hour prices."""

    hardware: float
    """Worker-hours (billed in the granularity)."""
    sla: float
    """Time with lag beyond the SLA."""
    rescale: float
    """The rescales' penalties and the work their pauses lose."""
    drain: float
    """Draining what is left at the horizon."""

    @property
    def total(self) -> float:
        return self.hardware + self.sla + self.rescale + self.drain

    def as_dict(self) -> dict[str, float]:
        return {
            "hardware": self.hardware,
            "sla": self.sla,
            "rescale": self.rescale,
            "drain": self.drain,
            "total": self.total,
        }


@dataclass(frozen=True)
class Plan:
    """The cheapest plan found: its segments, its cost and the best cost per first move;
    with its cost split and the best plan that starts with another move (the alternative the
    planner rejected), when the search had one."""

    segments: tuple[PlanSegment, ...]
    cost: float
    first_costs: dict[int, float] = field(default_factory=dict)
    expansions: int = 0
    split: CostSplit | None = None
    alternative: Plan | None = None

    @property
    def first(self) -> int:
        return self.segments[0].workers

    def describe(self) -> str:
        parts = [f"{s.workers} for {s.duration_s / 60:.0f} min" for s in self.segments[:4]]
        return ", then ".join(parts)

    def explain(self) -> dict[str, Any]:
        """The plan as plain data (JSON): its worker counts over the horizon, its cost and
        split, and the rejected alternative's."""

        def one(plan: Plan) -> dict[str, Any]:
            return {
                "segments": [
                    {
                        "start_min": s.start_s / 60,
                        "minutes": s.duration_s / 60,
                        "workers": s.workers,
                    }
                    for s in plan.segments
                ],
                "cost": plan.cost,
                "split": plan.split.as_dict() if plan.split else None,
            }

        return {
            **one(self),
            "alternative": one(self.alternative) if self.alternative else None,
            "first_costs": {str(n): c for n, c in sorted(self.first_costs.items())},
            "expansions": self.expansions,
        }


def sla_window_arrivals(
    past_rates: np.ndarray, future_rates: np.ndarray, step_s: float, window_s: float
) -> np.ndarray:
    """Messages arriving in the `window_s` before the end of each future step.

    `past_rates` are mean rates of the steps before now (oldest first); where they do not reach
    back far enough, the oldest known rate is assumed.
    """
    past = np.asarray(past_rates, dtype=float)
    past = past[np.isfinite(past)]
    future = np.asarray(future_rates, dtype=float)
    need = math.ceil(window_s / step_s) + 1
    fill = past[0] if past.size else (future[0] if future.size else 0.0)
    if past.size < need:
        past = np.concatenate((np.full(need - past.size, fill), past))
    rates = np.concatenate((past, future))
    cum = np.concatenate(([0.0], np.cumsum(rates * step_s)))
    grid = (np.arange(cum.size) - past.size) * step_s
    ends = (np.arange(future.size) + 1) * step_s
    return np.interp(ends, grid, cum) - np.interp(ends - window_s, grid, cum)


@lru_cache(maxsize=64)
def _efficient(partitions: int, lo: int, hi: int, max_factor: int = 1) -> tuple[int, ...]:
    return tuple(efficient_counts(partitions, lo, hi, max_factor))


def efficient_levels(partitions: int, lo: int, hi: int, max_factor: int = 1) -> tuple[int, ...]:
    """The efficient worker counts in [lo, hi] (cached: every decision asks)."""
    return _efficient(partitions, lo, hi, max_factor)


@lru_cache(maxsize=4096)
def _children(
    n: int, lo: int, hi: int, partitions: int, k: int, max_factor: int = 1
) -> tuple[int, ...]:
    out = {n}
    step = 1
    while True:  # the first step past a bound lands on it: the bounds are always reachable
        for cand in (n - step, n + step):
            out.add(max(lo, efficient_count(min(max(cand, lo), hi), partitions, max_factor)))
        if step > hi - lo:
            break
        step = step * k if step > 1 else k
    levels = _efficient(partitions, lo, hi, max_factor)
    i = bisect.bisect_right(levels, n)
    if i < len(levels):
        out.add(levels[i])
    j = bisect.bisect_left(levels, n) - 1
    if j >= 0:
        out.add(levels[j])
    return tuple(sorted(out))


def _just_in_time(capacity: np.ndarray, rates: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Fewest workers in [lo, hi] whose capacity covers each rate (capacity is non-decreasing)."""
    idx = np.searchsorted(capacity[: hi + 1], rates, side="left")
    return np.clip(idx, lo, hi).astype(np.int64)


@dataclass(frozen=True)
class _Context:
    """Per-problem arrays the batch evaluation reuses for every expansion."""

    step_s: float
    steps: int
    capacity: np.ndarray  # msg/s by worker count
    arrivals: np.ndarray  # msg per step
    sla_arrivals: np.ndarray
    inv_window: np.ndarray  # 1 / (msg in an SLA window at the step's rate * SLA seconds)
    pause: np.ndarray  # [old, new]: a rescale's lost work, seconds of the whole fleet
    just_in_time: np.ndarray  # fewest workers covering each step's forecast rate
    hw_per_step: float
    rescale_cost: float  # the fixed part of a rescale's cost
    per_worker_rescale: float  # and its penalty per worker of the new fleet
    pause_price: float  # price of one worker-second paused
    sla_per_step: float
    drain_cost: float  # cost per message left at the horizon
    cost: CostModel

    @classmethod
    def build(cls, p: PlanningProblem, cost: CostModel) -> _Context:
        dt = p.step_s
        fleet = p.fleet
        capacity = fleet.capacity_table(max(p.upper, p.workers))
        rates = np.asarray(p.rates, dtype=float)
        arrivals = np.asarray(p.sla_arrivals, dtype=float)
        rate = np.maximum(rates, 1e-9)
        window = np.maximum(arrivals / rate, dt)
        pause = fleet.loss_table(max(p.upper, p.workers))
        return cls(
            step_s=dt,
            steps=p.steps,
            capacity=capacity,
            arrivals=rates * dt,
            sla_arrivals=arrivals,
            inv_window=1.0 / (rate * window),
            pause=pause,
            just_in_time=_just_in_time(capacity, rates, p.min_workers, p.upper),
            hw_per_step=dt / 3600.0 * cost.worker_hour_price,
            rescale_cost=cost.rescale_cost,
            per_worker_rescale=cost.per_worker_rescale(0.0),
            pause_price=cost.worker_hour_price / 3600.0,
            sla_per_step=cost.sla_cost_per_minute * dt / 60.0,
            drain_cost=cost.worker_hour_price / p.worker_rate / 3600.0,
            cost=cost,
        )


class _Node:
    __slots__ = (
        "backlog_end",
        "best",
        "billing",
        "children",
        "cost_end",
        "depth",
        "exhausted",
        "hold_until",
        "j_end",
        "j_start",
        "own",
        "visits",
        "workers",
    )

    def __init__(self, workers: int, depth: int, j_start: int, j_end: int) -> None:
        self.workers = workers
        self.depth = depth
        self.j_start = j_start
        self.j_end = j_end
        self.backlog_end = 0.0
        self.cost_end = 0.0
        self.own = math.inf  # cost of holding this node's count to the horizon
        self.best = math.inf  # min over own and the subtree
        self.visits = 0
        self.children: list[_Node] | None = None
        self.exhausted = False
        self.billing: tuple[tuple[int, float], ...] = ()
        self.hold_until = 0  # plan step before which this count may not go down (its dwell)


class MctsPlanner:
    """Searches the game tree of worker counts for the cheapest plan to the horizon."""

    def __init__(
        self,
        settings: MctsSettings | None = None,
        cost: CostModel | None = None,
    ) -> None:
        self.settings = settings or MctsSettings()
        self.cost = cost or CostModel.from_settings(self.settings)

    # -- tree shape -------------------------------------------------------------------------
    def children(self, n: int, lo: int, hi: int, partitions: int, max_factor: int = 1) -> list[int]:
        """Counts reachable from n: n, n+-1, n+-k, n+-k^2, ... and the neighbouring capacity
        levels, each snapped to the cheapest count with the same capacity."""
        return list(_children(n, lo, hi, partitions, self.settings.k, max_factor))

    def _duration_steps(self, depth: int, step_s: float) -> int:
        s = self.settings
        return max(1, round(s.c_s * s.m**depth / step_s))

    def costs_for(self, p: PlanningProblem) -> CostModel:
        """The cost model of one problem: the planner's, its penalty raised by the problem's."""
        return self.cost.scaled(p.penalty_factor)

    def dwell_s(self, workers: int, pause_s: float, cost: CostModel | None = None) -> float:
        """How long a count reached by a rescale must hold before it may go down again.

        It grows with what the rescale cost (penalty plus the capacity its pause loses), so a
        rescale is only planned where the new count pays for itself over that time, and the
        plan cannot follow every dip of a noisy rate down and back up. Scale-ups stay allowed:
        an SLA breach is never the price of a dwell.
        """
        s = self.settings
        rescale = float((cost or self.cost).rescale(workers, pause_s))
        return s.min_dwell_s + s.dwell_per_cost_s * rescale

    def _dwell_steps(
        self, workers: int, pause_s: float, p: PlanningProblem, cost: CostModel
    ) -> int:
        return math.ceil(self.dwell_s(workers, pause_s, cost) / p.step_s - 1e-9)

    # -- evaluation -------------------------------------------------------------------------
    def _step_costs(
        self,
        ctx: _Context,
        w: np.ndarray,
        j0: int,
        backlog0: float,
        pause0: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | float, np.ndarray | float]:
        """Run each row of worker counts `w` (rows x steps from j0 to the horizon) on the fluid
        model: per step, the backlog and the cost's hardware, rescale and SLA parts (0.0 where
        a row has none). `pause0` is each row's pause at its first step (the move that led to
        it; 0: none)."""
        dt = ctx.step_s
        caps = ctx.capacity[w]
        # per step: arrivals less what the fleet serves (its capacity, less while it stands still)
        x = ctx.arrivals[None, j0:] - caps * dt
        if (pause0 > 0).any():
            n = min(x.shape[1], max(1, math.ceil(float(pause0.max()) / dt)))
            lost = np.clip(pause0[:, None] - np.arange(n)[None, :] * dt, 0.0, dt)
            x[:, :n] += caps[:, :n] * lost
        changes = w[:, 1:] != w[:, :-1]
        rescale: np.ndarray | float = 0.0
        if changes.any():
            paused = np.where(changes, np.minimum(ctx.pause[w[:, :-1], w[:, 1:]], dt), 0.0)
            x[:, 1:] += caps[:, 1:] * paused
            rescale = np.zeros(w.shape)
            rescale[:, 1:] = np.where(
                changes,
                ctx.rescale_cost + w[:, 1:] * (ctx.per_worker_rescale + paused * ctx.pause_price),
                0.0,
            )
        # the arrivals net of service, counted from j0, with nothing more to serve
        net = np.cumsum(x, axis=1)
        backlog = net - processed(-backlog0, net, 0.0)
        excess = backlog - ctx.sla_arrivals[None, j0:]
        sla: np.ndarray | float = 0.0
        if (excess > 0).any():
            over = np.clip(excess * ctx.inv_window[None, j0:], 0.0, 10.0)
            sla = np.where(excess > 0, ctx.sla_per_step * (1.0 + over), 0.0)
        return backlog, w * ctx.hw_per_step, rescale, sla

    def _rows(
        self,
        ctx: _Context,
        w: np.ndarray,
        j0: int,
        backlog0: float,
        pause0: np.ndarray,
        upto: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row of `w` on the fluid model (`_step_costs`): backlog at step `upto`, cost to
        `upto`, total cost to the horizon (with rescales inside the rows and the terminal cost
        of draining what is left)."""
        backlog, hardware, rescale, sla = self._step_costs(ctx, w, j0, backlog0, pause0)
        cum = np.cumsum(hardware + rescale + sla, axis=1)
        k = upto - j0 - 1
        total = cum[:, -1] + np.maximum(backlog[:, -1], 0.0) * ctx.drain_cost
        return backlog[:, k], cum[:, k], total

    def _rollout(
        self,
        ctx: _Context,
        counts: np.ndarray,
        j0: int,
        backlog0: float,
        pause0: np.ndarray,
        upto: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each count runs from j0 to `upto` (the node), then the default policy runs it to
        the horizon: keep the count, but cover every forecast rate it cannot (just in time).
        A leaf valued by that tail, not by holding, already knows a burst in an hour can be
        met then, so the search needs few samples to stop paying for it now."""
        cols = np.arange(ctx.steps - j0)
        tail = np.maximum(counts[:, None], ctx.just_in_time[None, j0:])
        w = np.where(cols[None, :] < upto - j0, counts[:, None], tail)
        return self._rows(ctx, w, j0, backlog0, pause0, upto)

    def _billing_extra(
        self, billing: tuple[tuple[int, float], ...], old: int, new: int, t: float
    ) -> tuple[float, tuple[tuple[int, float], ...]]:
        """Extra billed worker-seconds of removing workers mid-granule, and the new stack."""
        g = self.cost.billing_granularity_s
        if new > old:
            return 0.0, (*billing, (new - old, t))
        need, extra, stack = old - new, 0.0, list(billing)
        while need > 0 and stack:
            cnt, start = stack.pop()
            take = min(cnt, need)
            extra += take * ((g - (t - start) % g) % g)
            need -= take
            if cnt > take:
                stack.append((cnt - take, start))
        return extra, tuple(stack)

    def _expand(self, p: PlanningProblem, ctx: _Context, node: _Node) -> None:
        counts = _children(
            node.workers, p.min_workers, p.upper, p.partitions, self.settings.k, p.max_factor
        )
        depth = node.depth + 1
        j0 = node.j_end
        if j0 < node.hold_until:  # within the dwell: hold or go up, never down
            counts = tuple(n for n in counts if n >= node.workers)
        if p.down_floor > 0:  # never below what carries the recent mean rate
            floor = min(node.workers, p.down_floor)
            counts = tuple(n for n in counts if n >= floor)
        j1 = min(p.steps, j0 + self._duration_steps(depth, p.step_s))
        arr = np.array(counts, dtype=np.int64)
        pause0 = ctx.pause[node.workers, arr]
        b_end, c_end, total = self._rollout(ctx, arr, j0, node.backlog_end, pause0, j1)
        price = self.cost.worker_hour_price
        b_end, c_end, total = b_end.tolist(), c_end.tolist(), total.tolist()
        exhausted = j1 >= ctx.steps
        base = node.cost_end
        kids = []
        for i, n in enumerate(counts):
            child = _Node(n, depth, j0, j1)
            extra = 0.0
            billing = node.billing
            hold_until = node.hold_until
            if n != node.workers:
                pause = float(pause0[i])
                extra = float(ctx.cost.rescale(n, pause))
                # an up move never shortens a dwell: it is no way round one
                hold_until = max(hold_until, j0 + self._dwell_steps(n, pause, p, ctx.cost))
                if self.cost.billing_granularity_s > p.step_s:
                    secs, billing = self._billing_extra(
                        node.billing, node.workers, n, j0 * p.step_s
                    )
                    extra += secs / 3600.0 * price
            child.billing = billing
            child.hold_until = hold_until
            child.backlog_end = b_end[i]
            child.cost_end = base + extra + c_end[i]
            child.own = child.best = base + extra + total[i]
            child.exhausted = exhausted
            kids.append(child)
        node.children = kids

    # -- search -----------------------------------------------------------------------------
    def plan(self, p: PlanningProblem, salt: int = 0) -> Plan:
        """Search for the cheapest plan; deterministic for (settings.seed, salt)."""
        if p.steps == 0:
            raise ValueError("planning problem has no steps")
        rng = random.Random(self.settings.seed * 1_000_003 + salt)
        deadline = time.perf_counter() + self.settings.max_decision_s
        ctx = _Context.build(p, self.costs_for(p))
        if self._hold_is_optimal(p, ctx):
            w = np.full((1, p.steps), p.workers)
            cost = float(self._rows(ctx, w, 0, p.backlog, np.zeros(1), 1)[2][0])
            seg = PlanSegment(0.0, p.steps * p.step_s, p.workers)
            split = self._split(p, ctx, [p.workers] * p.steps)
            return Plan((seg,), cost, {p.workers: cost}, 0, split)
        root = _Node(p.workers, -1, 0, 0)
        root.backlog_end = p.backlog
        root.billing = ((p.workers, 0.0),)
        root.hold_until = math.ceil(max(p.dwell_left_s, 0.0) / p.step_s - 1e-9)
        expl = self.settings.exploration
        expansions = 0
        for i in range(self.settings.samples):
            if root.exhausted or (i > 0 and time.perf_counter() > deadline):
                break  # the root is always expanded: a plan needs its first move
            node, path = root, [root]
            while node.children is not None:
                live = [c for c in node.children if not c.exhausted]
                if not live:
                    node.exhausted = True
                    break
                bests = [c.best for c in live]
                lo, hi = min(bests), max(bests)
                spread = hi - lo if hi > lo else 1.0
                logn = math.log(node.visits + 1)
                node = max(
                    live,
                    key=lambda c: (
                        (hi - c.best) / spread
                        + expl * math.sqrt(logn / (c.visits + 1))
                        + rng.random() * 1e-9
                    ),
                )
                path.append(node)
            if node.children is None and not node.exhausted:
                self._expand(p, ctx, node)
                expansions += 1
            for n in reversed(path):
                n.visits += 1
                if n.children:
                    n.best = min(n.own, min(c.best for c in n.children))
                    n.exhausted = n.exhausted or all(c.exhausted for c in n.children)
        return self._extract(p, ctx, root, expansions)

    def _margin(self, hold_cost: float) -> float:
        """How much a move must save against holding the count to the horizon: a share of
        holding's cost, so the forecast's noise (which scales with the traffic) does not
        decide a rescale."""
        return self.settings.hysteresis * max(hold_cost, 0.0)

    @staticmethod
    def _hold_is_optimal(p: PlanningProblem, ctx: _Context) -> bool:
        """At the fewest workers, with no backlog and room for every forecast rate, staying
        put is provably the cheapest plan (least hardware, no lag, no rescale): skip the search.
        """
        if p.workers != p.min_workers or p.backlog > 0:
            return False
        return bool(ctx.capacity[p.workers] * ctx.step_s >= ctx.arrivals.max())

    def _extract(self, p: PlanningProblem, ctx: _Context, root: _Node, expansions: int) -> Plan:
        """The cheapest first move and its best continuation, split; and the same for the
        best other first move (the alternative)."""
        assert root.children
        first_costs = {c.workers: c.best for c in root.children}
        node = min(root.children, key=lambda c: (c.best, c.workers))
        stay = next(c for c in root.children if c.workers == p.workers)
        if node is not stay and node.best > stay.own - self._margin(stay.own):
            node = stay  # hysteresis: a move must beat holding the count by the margin
        others = [c for c in root.children if c.workers != node.workers]
        alternative = None
        if others:
            other = min(others, key=lambda c: (c.best, c.workers))
            alternative = self._plan_from(p, ctx, other)
        chosen = self._plan_from(p, ctx, node)
        return replace(
            chosen, first_costs=first_costs, expansions=expansions, alternative=alternative
        )

    def _plan_from(self, p: PlanningProblem, ctx: _Context, node: _Node) -> Plan:
        """Follow the cheapest children from `node`; where the tree ends, the default
        policy's tail."""
        cost = node.best
        schedule: list[int] = []
        while True:
            schedule.extend([node.workers] * (node.j_end - node.j_start))
            kids = node.children or []
            best_kid = min(kids, key=lambda c: (c.best, c.workers), default=None)
            if best_kid is None or best_kid.best >= node.own:
                tail = np.maximum(node.workers, ctx.just_in_time[node.j_end :])
                schedule.extend(int(n) for n in tail)
                break
            node = best_kid
        segments: list[PlanSegment] = []
        for j, n in enumerate(schedule):
            if segments and segments[-1].workers == n:
                last = segments[-1]
                segments[-1] = PlanSegment(last.start_s, last.duration_s + p.step_s, n)
            else:
                segments.append(PlanSegment(j * p.step_s, p.step_s, n))
        return Plan(tuple(segments), cost, split=self._split(p, ctx, schedule))

    def backlog(self, p: PlanningProblem, schedule: Sequence[int]) -> np.ndarray:
        """The backlog at the end of each plan step of a per-step schedule of worker counts,
        on the fluid model the plan's cost is priced on."""
        ctx = _Context.build(p, self.costs_for(p))
        w = self._schedule_row(p, schedule)
        return self._step_costs(ctx, w, 0, p.backlog, ctx.pause[p.workers, w[:, 0]])[0][0]

    @staticmethod
    def _schedule_row(p: PlanningProblem, schedule: Sequence[int]) -> np.ndarray:
        if len(schedule) != p.steps:
            raise ValueError(f"schedule has {len(schedule)} steps, problem has {p.steps}")
        return np.array([list(schedule)], dtype=np.int64)

    def evaluate(self, p: PlanningProblem, schedule: Sequence[int]) -> float:
        """Cost of a given per-step schedule of worker counts (e.g. a steady 32), same model."""
        return self.split(p, schedule).total

    def split(self, p: PlanningProblem, schedule: Sequence[int]) -> CostSplit:
        """The cost of a per-step schedule of worker counts by what it pays for."""
        self._schedule_row(p, schedule)
        return self._split(p, _Context.build(p, self.costs_for(p)), schedule)

    def _split(self, p: PlanningProblem, ctx: _Context, schedule: Sequence[int]) -> CostSplit:
        w = np.array([list(schedule)], dtype=np.int64)
        pause0 = ctx.pause[p.workers, w[:, 0]]
        backlog, hardware, rescale, sla = self._step_costs(ctx, w, 0, p.backlog, pause0)
        hardware_cost = float(np.sum(hardware))
        rescale_cost = float(np.sum(rescale))
        if schedule[0] != p.workers:
            rescale_cost += float(ctx.cost.rescale(schedule[0], float(pause0[0])))
        if self.cost.billing_granularity_s > p.step_s:
            billing: tuple[tuple[int, float], ...] = ((p.workers, 0.0),)
            prev = p.workers
            for j, n in enumerate(schedule):
                if n != prev:
                    secs, billing = self._billing_extra(billing, prev, n, j * p.step_s)
                    hardware_cost += secs / 3600.0 * self.cost.worker_hour_price
                prev = n
        return CostSplit(
            hardware=hardware_cost,
            sla=float(np.sum(sla)),
            rescale=rescale_cost,
            drain=max(float(backlog[0, -1]), 0.0) * ctx.drain_cost,
        )
