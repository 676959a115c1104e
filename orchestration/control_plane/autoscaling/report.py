"""How simulation results are shown: a rich table, JSON, and a plot of workers and lag.

The plot uses matplotlib's Agg backend so it works on headless machines and in CI.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from orchestration.control_plane.autoscaling.simulator import PolicySummary, SimulationResult

__all__ = ["plot_results", "print_table", "summaries_json", "summary_table"]

logger = logging.getLogger(__name__)


def summary_table(summaries: Sequence[PolicySummary], title: str | None = None) -> Table:
    """One row per policy: the figures a comparison of policies reads."""
    table = Table(title=title)
    for name, justify in (
        ("policy", "left"),
        ("worker-hours", "right"),
        ("vs static", "right"),
        ("mean util", "right"),
        ("SLA viol. min", "right"),
        ("max lag s", "right"),
        ("rescales", "right"),
        ("rescales/day", "right"),
        ("pause min", "right"),
        ("decision ms mean/p99", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    # with workers on spot: the cost at spot prices (on demand), interruptions / tasks moved
    spot = any(s.cost_dollars < s.on_demand_cost_dollars or s.interruptions for s in summaries)
    if spot:
        table.add_column("cost $ (on demand)", justify="right")
        table.add_column("interrupted / moved", justify="right")
    for s in summaries:
        spot_cells = (
            [
                f"{s.cost_dollars:,.0f} ({s.on_demand_cost_dollars:,.0f})",
                f"{s.interruptions:,} / {s.tasks_moved:,}",
            ]
            if spot
            else []
        )
        table.add_row(
            s.policy,
            f"{s.worker_hours:,.0f}",
            f"{s.savings_vs_static:.2f}x",
            f"{s.mean_utilisation:.0%}",
            f"{s.sla_violation_minutes:,.1f}",
            f"{s.max_lag_s:,.0f}",
            f"{s.rescales:,}",
            f"{s.rescales_per_day:.1f}",
            f"{s.pause_minutes:,.0f}",
            f"{s.decision_mean_ms:.2f} / {s.decision_p99_ms:.2f}",
            *spot_cells,
        )
    return table


def print_table(
    summaries: Sequence[PolicySummary], title: str | None = None, console: Console | None = None
) -> None:
    (console or Console(width=max(Console().width, 150))).print(summary_table(summaries, title))


def summaries_json(summaries: Sequence[PolicySummary], **extra: object) -> str:
    """JSON document: settings-like extras plus one object per policy."""
    return json.dumps({**extra, "policies": [s.as_dict() for s in summaries]}, indent=2)


def _binned(
    days: np.ndarray, workers: np.ndarray, lag: np.ndarray, points: int = 1500
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Long runs are drawn as bins: mean workers and max lag, so a plot stays readable."""
    size = max(1, int(np.ceil(days.size / points)))
    if size == 1:
        return days, workers, lag
    n = days.size // size * size
    shape = (-1, size)
    return (
        days[:n].reshape(shape)[:, -1],
        workers[:n].reshape(shape).mean(axis=1),
        lag[:n].reshape(shape).max(axis=1),
    )


def plot_results(
    results_by_trace: Mapping[str, Sequence[SimulationResult]], path: str | Path, sla_s: float
) -> Path:
    """Workers (top) and time lag (bottom) over time, one column per trace; long runs are
    binned (mean workers, max lag per bin)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = max(1, len(results_by_trace))
    fig, axes = plt.subplots(2, cols, figsize=(5.5 * cols, 6.5), squeeze=False, sharex="col")
    for c, (trace, results) in enumerate(results_by_trace.items()):
        top, bottom = axes[0][c], axes[1][c]
        for res in results:
            a = res.arrays()
            days, workers, lag = _binned(a["time"] / 86400.0, a["workers"], a["max_time_lag"])
            top.step(days, workers, where="pre", lw=0.8, label=res.policy)
            bottom.plot(days, lag / 60.0, lw=0.8, label=res.policy)
        top.set_title(trace)
        top.set_ylabel("workers")
        top.set_yscale("log")
        bottom.axhline(sla_s / 60.0, color="red", ls="--", lw=0.8, label="SLA")
        bottom.set_ylabel("max time lag (min)")
        bottom.set_xlabel("days")
        if c == 0:
            top.legend(fontsize=7, loc="upper right")
            bottom.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    logger.info("wrote plot %s", path)
    return path
