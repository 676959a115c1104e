"""`sluice status`: per task, messages in, %util, backlog, time lag and heartbeat, live."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import deque

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestration.lag import (
    LagSample,
    TaskLag,
    collect_task_lags,
    lag_status,
    worst,
)
from orchestration.runtime import Runtime
from pipelines.exceptions import SluiceError
from pipelines.views import ResolvedView

__all__ = ["StatusTracker", "register", "render"]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="live per-task metrics of the stream fleet")
    parser.add_argument("--once", action="store_true", help="print one table and exit")
    parser.add_argument("--json", action="store_true", help="print one JSON snapshot and exit")
    parser.add_argument("--interval", type=float, default=2.0, help="refresh seconds")
    parser.add_argument(
        "--stale-after", type=float, default=300.0, help="heartbeat age that marks a task stale"
    )
    parser.set_defaults(func=run)


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m"


class StatusTracker:
    """Keeps a sliding window of samples per task so each refresh can say OK/WARN/STALL/STOP/ERR."""

    def __init__(self, window: int = 10, stale_after_s: float = 300.0) -> None:
        self.window = window
        self.stale_after_s = stale_after_s
        self.samples: dict[str, deque[LagSample]] = {}

    def update(self, lags: list[TaskLag]) -> dict[str, str]:
        now = time.time()
        out = {}
        for lag in lags:
            samples = self.samples.setdefault(lag.status.task, deque(maxlen=self.window))
            samples.append(LagSample(now, lag.status.next_offset, lag.backlog, lag.heartbeat_age_s))
            out[lag.status.task] = lag_status(list(samples), self.stale_after_s)
        return out


def render(lags: list[TaskLag], statuses: dict[str, str] | None = None) -> Group:
    """The task table and a summary line; ``statuses`` come from a :class:`StatusTracker` that
    has watched earlier refreshes (one look is taken here if none is given), and a stale task
    keeps the summary from saying OK."""
    if statuses is None:
        statuses = StatusTracker().update(lags)
    table = Table(title="Sluice stream tasks", title_justify="left")
    for name, justify in (
        ("task", "left"),
        ("status", "left"),
        ("worker", "left"),
        ("pid", "right"),
        ("state", "left"),
        ("in", "right"),
        ("rate/s", "right"),
        ("util", "right"),
        ("backlog", "right"),
        ("time lag", "right"),
        ("dlq", "right"),
        ("late", "right"),
        ("checkpoint", "right"),
        ("seen", "right"),
    ):
        table.add_column(name, justify=justify)
    for lag in lags:
        s = lag.status
        state = Text("stale", style="bold red") if lag.stale else Text(s.state)
        health = statuses.get(s.task, "-")
        table.add_row(
            s.task,
            Text(health, style={"OK": "green", "WARN": "yellow"}.get(health, "bold red")),
            s.worker_id,
            str(s.pid),
            state,
            f"{s.consumed:,}",
            f"{s.rate_in:,.0f}",
            f"{s.utilization:.0%}",
            f"{lag.backlog:,}",
            _fmt_s(lag.time_lag_s),
            f"{s.dead_lettered:,}",
            f"{s.dropped_late:,}",
            "-" if s.checkpointed_offset is None else f"{s.checkpointed_offset:,}",
            _fmt_s(lag.heartbeat_age_s),
        )
    total_in = sum(lag.status.consumed for lag in lags)
    total_backlog = sum(lag.backlog for lag in lags)
    stale = sum(lag.stale for lag in lags)
    overall = worst([*statuses.values(), *(["STOP"] if stale else [])])
    footer = Text(
        f"{overall}  {len(lags)} tasks{f' ({stale} stale)' if stale else ''}  "
        f"in {total_in:,}  backlog {total_backlog:,}  "
        f"dead-lettered {sum(lag.status.dead_lettered for lag in lags):,}",
        style="dim",
    )
    if not lags:
        footer = Text("no task has reported yet: is the fleet running? (sluice stream / sluice up)")
    return Group(table, footer)


def render_views(views: dict[str, ResolvedView]) -> Table:
    """Each view's state and where its definition in force comes from (newest change wins)."""
    table = Table(title="Views", title_justify="left")
    for name in ("view", "state", "source", "changed", "fingerprint"):
        table.add_column(name)
    for name, resolved in views.items():
        style = "dim" if not resolved.runs else None
        changed = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(resolved.changed_at))
        table.add_row(
            name, resolved.state, resolved.source, changed, resolved.view.fingerprint, style=style
        )
    return table


def _views(runtime: Runtime) -> dict[str, ResolvedView]:
    try:
        return runtime.resolved_views()
    except SluiceError as exc:  # a broken views file must not hide the fleet
        log.warning("cannot resolve the views: %s", exc)
        return {}


def _snapshot(lags: list[TaskLag]) -> list[dict]:
    return [
        {
            **lag.status.row(),
            "views": lag.status.views,
            "backlog": lag.backlog,
            "time_lag_s": lag.time_lag_s,
            "heartbeat_age_s": round(lag.heartbeat_age_s, 3),
            "stale": lag.stale,
        }
        for lag in lags
    ]


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    if args.json:
        json.dump(_snapshot(collect_task_lags(runtime, args.stale_after)), sys.stdout, indent=2)
        print()
        return 0
    console = Console()
    if args.once:
        console.print(render_views(_views(runtime)))
        lags = collect_task_lags(runtime, args.stale_after)
        console.print(render(lags, StatusTracker(stale_after_s=args.stale_after).update(lags)))
        return 0
    console.print(render_views(_views(runtime)))
    tracker = StatusTracker(stale_after_s=args.stale_after)

    def frame() -> Group:
        lags = collect_task_lags(runtime, args.stale_after)
        return render(lags, tracker.update(lags))

    with Live(frame(), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(args.interval)
                live.update(frame(), refresh=True)
        except KeyboardInterrupt:
            return 0
