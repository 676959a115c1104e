"""`sluice status`: per task, messages in, %util, backlog, time lag and heartbeat, live; per
view, its table lag (the oldest change not yet published to its table).

With agents, each task also shows its job-model state (Mist's Waiting, Scheduled, Running,
Disabled), its generation and its disabled views, and the agents are listed with the
coordinator marked. The summary is not OK while any task is stale, unassigned (Waiting),
Disabled, or runs with a view disabled; each of those is counted in the summary line. A task
Waiting longer than ``SLUICE_TASK_WAITING_MAX_S`` (what the coordinator's watchdog should not
allow) is named under the table with why, and flagged in ``--json`` (``waiting_too_long``).
In ``--json`` a task's row also carries the table lag of each view that reads its topic
(``table_lag_s``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

from orchestration.control_plane.fleet.scheduling import waiting_too_long
from orchestration.control_plane.lag import (
    LagTracker,
    ProducedProbe,
    TaskLag,
    collect_task_lags,
    worst,
)
from orchestration.control_plane.runtime import Runtime
from orchestration.control_plane.spark.server import SparkConnectServer
from pipelines.control import AgentRecord, Assignment
from pipelines.exceptions import SluiceError
from pipelines.segments import table_lag_s
from pipelines.stopping import StopDeadline, on_stop_signals, run_until_stopped
from pipelines.views import ResolvedView

__all__ = ["JobView", "job_view", "register", "render"]


@dataclass(frozen=True)
class JobView:
    """The job model as status shows it: assignments, disabled views, agents, the leader."""

    assignments: dict[str, Assignment] = field(default_factory=dict)
    disabled_views: dict[str, list[str]] = field(default_factory=dict)
    agents: list[AgentRecord] = field(default_factory=list)
    leader: str | None = None
    time_shares: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per agent: share of its wall time spent reading, decoding, aggregating, ... (last report)."""
    crashes: dict[str, int] = field(default_factory=dict)
    """Per task: crashes in the last SLUICE_VIEW_CRASH_WINDOW_S (the crash log); a task that
    crashed lately is WARN."""
    waiting_max_s: float = 60.0
    """``SLUICE_TASK_WAITING_MAX_S``."""
    waiting_s: dict[str, float] = field(default_factory=dict)
    """Tasks Waiting longer than ``waiting_max_s``: for how long (at the read)."""

    def health(self, task: str) -> str | None:
        """The task's status from the job model alone (None: nothing to say)."""
        a = self.assignments.get(task)
        if a is not None and a.state in ("Waiting", "Disabled"):
            return "STOP"
        if (
            (a is not None and a.state == "Scheduled")
            or self.disabled_views.get(task)
            or self.crashes.get(task)
        ):
            return "WARN"
        return None


def job_view(runtime: Runtime) -> JobView:
    """Read the job model; an unreadable one shows as empty (the metrics still show)."""
    jobs = runtime.control.jobs
    try:
        disabled: dict[str, list[str]] = {}
        for state in jobs.view_states():
            if state.state == "Disabled":
                disabled.setdefault(state.task, []).append(state.view)
        lease = jobs.lease("coordinator")
        leader = lease["holder"] if lease and lease["expires_at"] > time.time() else None
        shares = {w["worker_id"]: w["time_shares"] for w in runtime.control.workers()}
        since = time.time() - runtime.settings.view_crash_window_s
        crashes = Counter(c.task for c in runtime.control.crashes.recent(since))
        assignments = jobs.assignments()
        waiting_max_s = runtime.settings.task_waiting_max_s
        now = time.time()
        overdue = {a.task: now - a.since for a in waiting_too_long(assignments, now, waiting_max_s)}
        return JobView(
            {a.task: a for a in assignments},
            disabled,
            jobs.agents(),
            leader,
            shares,
            dict(crashes),
            waiting_max_s,
            overdue,
        )
    except SQLAlchemyError as exc:  # status must show what it can
        log.warning("cannot read the job model: %s", exc)
        return JobView()


log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="per-task metrics of the stream fleet (live on a terminal)",
        description="Views and a per-task table. On a terminal the table refreshes until "
        "Ctrl-C; written to a file or a pipe it is printed once (--watch keeps it live).",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="print one table and exit")
    mode.add_argument(
        "--watch", action="store_true", help="refresh the table until Ctrl-C, even into a pipe"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON snapshot and exit")
    parser.add_argument("--interval", type=float, default=2.0, help="refresh seconds")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=30.0,
        help="report age (s) that marks a task stale; workers report every 2 s (default 30)",
    )
    parser.set_defaults(func=run)


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m"


TASK_COLUMNS = (
    ("task", "left", True),
    ("status", "left", True),
    ("job", "left", True),
    ("agent", "left", True),
    ("pid", "right", False),
    ("state", "left", False),
    ("in", "right", False),
    ("bucket", "right", False),
    ("rate/s", "right", True),
    ("util", "right", False),
    ("backlog", "right", True),
    ("time lag", "right", True),
    ("dlq", "right", False),
    ("late", "right", False),
    ("checkpoint", "right", False),
    ("seen", "right", True),
)
"""(name, justify, kept on a narrow terminal) of each column of the task table."""

WIDE = 150
"""Terminal columns from which the task table shows every column."""


def render(
    lags: list[TaskLag],
    statuses: dict[str, str] | None = None,
    job: JobView | None = None,
    width: int | None = None,
) -> Group:
    """The task table and a summary line; ``statuses`` come from a
    :class:`~orchestration.control_plane.lag.LagTracker` that has watched earlier refreshes (one
    look is taken here if none is given). A stale task, and with ``job`` a Waiting or Disabled task
    or a disabled view, keep the summary from OK. On a terminal narrower than :data:`WIDE`
    (``width``) the table keeps the columns an operator reads first."""
    if statuses is None:
        statuses = LagTracker().update(lags)
    job = job or JobView()
    statuses = task_statuses(lags, statuses, job)
    keep = [
        i for i, column in enumerate(TASK_COLUMNS) if width is None or width >= WIDE or column[2]
    ]
    table = Table(title="Sluice stream tasks", title_justify="left")
    for i in keep:
        table.add_column(TASK_COLUMNS[i][0], justify=TASK_COLUMNS[i][1])
    reported = {lag.status.task for lag in lags}
    rows = []
    for lag in lags:
        s = lag.status
        state = Text("stale", style="bold red") if lag.stale else Text(s.state)
        health = statuses.get(s.task, "-")
        rows.append(
            [
                s.task,
                Text(health, style={"OK": "green", "WARN": "yellow"}.get(health, "bold red")),
                _job_cell(job, s.task),
                s.worker_id,
                str(s.pid),
                state,
                f"{s.consumed:,}",
                _bucket_cell(s.views.get("bucket")),
                f"{s.rate_in:,.0f}",
                f"{s.utilization:.0%}",
                f"{lag.backlog:,}",
                _fmt_s(lag.time_lag_s),
                f"{s.dead_lettered:,}",
                f"{s.dropped_late:,}",
                "-" if s.checkpointed_offset is None else f"{s.checkpointed_offset:,}",
                _fmt_s(lag.heartbeat_age_s),
            ]
        )
    for task in sorted(set(job.assignments) - reported):  # assigned, never reported
        health = statuses.get(task, "-")
        a = job.assignments[task]
        rows.append(
            [
                task,
                Text(health, style={"OK": "green", "WARN": "yellow"}.get(health, "bold red")),
                _job_cell(job, task),
                a.agent_id or "-",
                *["-"] * 12,
            ]
        )
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    total_in = sum(lag.status.consumed for lag in lags)
    total_backlog = sum(lag.backlog for lag in lags)
    stale = sum(lag.stale for lag in lags)
    overall = worst([*statuses.values(), *(["STOP"] if stale else [])])
    counts = [f"{stale} stale"] if stale else []
    for state in ("Waiting", "Scheduled", "Disabled"):
        n = sum(a.state == state for a in job.assignments.values())
        if n:
            counts.append(f"{n} {state.lower()}")
    crashed = sum(job.crashes.values())
    if crashed:
        counts.append(f"{crashed} task crash{'es' if crashed > 1 else ''} lately")
    quarantined = sum(lag.status.views.get("quarantined", 0) for lag in lags)
    if quarantined:
        counts.append(f"{quarantined} record{'s' if quarantined > 1 else ''} quarantined")
    resets = sum(lag.status.views.get("offset_resets", 0) for lag in lags)
    if resets:
        counts.append(f"{resets} offset reset{'s' if resets > 1 else ''} (out of range)")
    views_off = sum(len(v) for v in job.disabled_views.values())
    if views_off:
        counts.append(f"{views_off} view{'s' if views_off > 1 else ''} disabled")
    tasks = len(reported | set(job.assignments))
    detail = f" ({', '.join(counts)})" if counts else ""
    footer = Text(
        f"{overall}  {tasks} tasks{detail}  "
        f"in {total_in:,}  backlog {total_backlog:,}  "
        f"dead-lettered {sum(lag.status.dead_lettered for lag in lags):,}",
        style="dim",
    )
    if not lags and not job.assignments:
        footer = Text("no task has reported yet: is the fleet running? (sluice stream / sluice up)")
    parts = [table, footer]
    errors = render_type_errors(lags)
    if errors is not None:
        parts.append(errors)
    if job.waiting_s:
        parts.append(_overdue_note(job))
    if job.agents:
        parts.insert(0, render_agents(job))
    return Group(*parts)


def type_error_rows(lags: list[TaskLag]) -> list[tuple[str, str, str, int, int]]:
    """(topic, field, reason, dead-lettered, nulled) summed over the topic's tasks, for each
    declared field with a value that did not fit its type (as each task last reported)."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for lag in lags:
        found = lag.status.views.get("type_errors") or {}
        for column, outcome in enumerate(("dead_lettered", "nulled")):
            for name, reasons in (found.get(outcome) or {}).items():
                for reason, n in reasons.items():
                    key = (lag.status.topic, name, reason)
                    counts.setdefault(key, [0, 0])[column] += int(n)
    return [(*key, dead, nulled) for key, (dead, nulled) in sorted(counts.items())]


def render_type_errors(lags: list[TaskLag]) -> Table | None:
    """Per topic, the fields with values that did not fit their declared type: messages
    dead-lettered for them, and values made null (``on_type_error: null``); None when none."""
    rows = type_error_rows(lags)
    if not rows:
        return None
    table = Table(title="Type errors per field", title_justify="left")
    for name, justify in (
        ("topic", "left"),
        ("field", "left"),
        ("reason", "left"),
        ("dead-lettered", "right"),
        ("nulled", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for topic, name, reason, dead, nulled in rows:
        table.add_row(
            topic, name, reason, f"{dead:,}" if dead else "-", f"{nulled:,}" if nulled else "-"
        )
    return table


def task_statuses(lags: list[TaskLag], statuses: dict[str, str], job: JobView) -> dict[str, str]:
    """Each task's status: Burrow's from its lag window, made worse by what the job model
    says (Waiting, Disabled, a disabled view) and by a stale report (STOP)."""
    out = dict(statuses)
    for lag in lags:
        if lag.stale:
            out[lag.status.task] = worst([out.get(lag.status.task, "OK"), "STOP"])
    for task in {lag.status.task for lag in lags} | set(job.assignments):
        from_job = job.health(task)
        if from_job is not None:
            out[task] = worst([out.get(task, "OK"), from_job])
    return out


def _bucket_cell(bucket: dict | None) -> str:
    """``1/4 26% 0.3µs``: a virtual task's bucket of its factor, the share of the partition's
    records it kept and its hashing time per record read; ``-`` for a whole partition."""
    if not bucket or bucket.get("factor", 1) == 1:
        return "-"
    seen = bucket.get("seen", 0)
    kept = f" {bucket.get('kept', 0) / seen:.0%}" if seen else ""
    hashing = f" {bucket.get('hash_s', 0.0) / seen * 1e6:.1f}µs" if seen else ""
    return f"{bucket['bucket']}/{bucket['factor']}{kept}{hashing}"


def _overdue_note(job: JobView) -> Text:
    """Names every task Waiting longer than the watchdog allows, with what it waits for."""
    named = []
    for task, waited in sorted(job.waiting_s.items()):
        a = job.assignments[task]
        mark = f" for {a.handoff_to}" if a.handoff_to else ""
        named.append(f"{task} Waiting{mark} {waited:.0f}s ({a.reason})")
    return Text(
        f"Waiting longer than {job.waiting_max_s:g}s (SLUICE_TASK_WAITING_MAX_S): "
        + "; ".join(named),
        style="bold red",
    )


def _job_cell(job: JobView, task: str) -> Text:
    a = job.assignments.get(task)
    if a is None:
        return Text("-")
    text = Text(f"{a.state} g{a.generation}", style=_STATE_STYLE.get(a.state))
    if job.disabled_views.get(task):
        text.append(f" ({', '.join(job.disabled_views[task])} off)", style="bold red")
    return text


_STATE_STYLE = {"Running": "green", "Scheduled": "yellow", "Waiting": "bold red", "Disabled": "red"}


def _shares(shares: dict[str, float]) -> str:
    """``read 12% decode 20% ...`` for the parts that took any time; the rest is waiting."""
    parts = [f"{part} {share:.0%}" for part, share in shares.items() if share >= 0.005]
    return " ".join(parts) or "-"


def render_agents(job: JobView) -> Table:
    """Each agent: where it runs, its state, heartbeat age and tasks; the coordinator marked."""
    now = time.time()
    table = Table(title="Agents", title_justify="left")
    for name in ("agent", "host", "pid", "state", "heartbeat", "tasks", "role", "where time goes"):
        table.add_column(name)
    running = {}
    for a in job.assignments.values():
        if a.state in ("Scheduled", "Running") and a.agent_id:
            running[a.agent_id] = running.get(a.agent_id, 0) + 1
    for agent in job.agents:
        table.add_row(
            agent.agent_id,
            agent.host,
            str(agent.pid),
            agent.state,
            _fmt_s(agent.heartbeat_age_s(now)),
            str(running.get(agent.agent_id, 0)),
            "coordinator" if agent.agent_id == job.leader else "",
            _shares(job.time_shares.get(agent.agent_id, {})),
            style="dim" if agent.state in ("stopped", "lost") else None,
        )
    return table


def render_views(
    views: dict[str, ResolvedView], table_lags: dict[str, float] | None = None
) -> Table:
    """Each view's state, where its definition in force comes from (newest change wins) and
    its table lag: how long the oldest change a task flushed has waited for the publisher."""
    table_lags = table_lags or {}
    table = Table(title="Views", title_justify="left")
    for name in ("view", "state", "source", "changed", "fingerprint", "table lag"):
        table.add_column(name)
    for name, resolved in views.items():
        style = "dim" if not resolved.runs else None
        changed = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(resolved.changed_at))
        table.add_row(
            name,
            resolved.state,
            resolved.source,
            changed,
            resolved.view.fingerprint,
            _fmt_s(table_lags.get(name)),
            style=style,
        )
    return table


def table_lags(runtime: Runtime, views: dict[str, ResolvedView]) -> dict[str, float]:
    """Each view's table lag in seconds (:func:`pipelines.segments.table_lag_s`); {} when the
    storage cannot be read (status must show what it can)."""
    try:
        store = runtime.store
        return {name: table_lag_s(store, name) for name in views}
    except Exception as exc:  # a disk or S3 error alike: status must show what it can
        log.warning("cannot read the change log: %s", exc)
        return {}


def _views(runtime: Runtime) -> dict[str, ResolvedView]:
    try:
        return runtime.resolved_views()
    except SluiceError as exc:  # a broken views file must not hide the fleet
        log.warning("cannot resolve the views: %s", exc)
        return {}


def _snapshot(
    lags: list[TaskLag],
    job: JobView,
    views: dict[str, ResolvedView] | None = None,
    table_lags: dict[str, float] | None = None,
) -> list[dict]:
    """One row per task. A reported task's row carries ``table_lag_s``: the table lag (what
    the Views table shows, fleet-wide) of each view that reads its topic, or None where the
    change log could not be read."""
    statuses = task_statuses(lags, LagTracker().update(lags), job)
    views, table_lags = views or {}, table_lags or {}

    def view_lags(topic: str) -> dict[str, float | None]:
        return {
            name: None if (lag := table_lags.get(name)) is None else round(lag, 3)
            for name, resolved in views.items()
            if resolved.view.topic == topic
        }

    def job_fields(task: str) -> dict:
        a = job.assignments.get(task)
        return {
            "status": statuses.get(task, "OK"),
            "job_state": a.state if a else None,
            "job_reason": a.reason if a else None,
            "agent_id": a.agent_id if a else None,
            "disabled_views": job.disabled_views.get(task, []),
            "waiting_too_long": task in job.waiting_s,
        }

    reported = [
        {
            **lag.status.row(),
            "views": lag.status.views,
            "backlog": lag.backlog,
            "time_lag_s": lag.time_lag_s,
            "heartbeat_age_s": round(lag.heartbeat_age_s, 3),
            "stale": lag.stale,
            "table_lag_s": view_lags(lag.status.topic),
            **job_fields(lag.status.task),
        }
        for lag in lags
    ]
    never = sorted(set(job.assignments) - {lag.status.task for lag in lags})
    return reported + [{"task": task, **job_fields(task)} for task in never]


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    stop = threading.Event()
    # status holds nothing: on SIGTERM or SIGINT it exits at once, whatever it waits on
    deadline = StopDeadline(runtime.settings.stop_timeout_s, "sluice status", exit_code=0)
    on_stop_signals(stop, deadline)
    run_until_stopped(lambda: show(runtime, args, stop), stop, "status", grace_s=1.0)
    return 0


def _spark_line(runtime: Runtime) -> Text:
    """The warm Spark Connect server corrections use: health, memory, restarts."""
    health = SparkConnectServer(runtime.settings.resolved_state_dir).health()
    return Text(health.line(), style="green" if health.running else "dim")


def show(runtime: Runtime, args: argparse.Namespace, stop: threading.Event) -> None:
    """What `sluice status` prints: once (``--once``, ``--json``) or live until ``stop``."""
    if args.json:
        lags = collect_task_lags(runtime, args.stale_after)
        views = _views(runtime)
        snapshot = _snapshot(lags, job_view(runtime), views, table_lags(runtime, views))
        json.dump(snapshot, sys.stdout, indent=2)
        print()
        return
    console = Console()
    if args.once or not (args.watch or sys.stdout.isatty()):
        views = _views(runtime)
        console.print(render_views(views, table_lags(runtime, views)))
        lags = collect_task_lags(runtime, args.stale_after)
        tracker = LagTracker(stale_after_s=args.stale_after)
        console.print(render(lags, tracker.update(lags), job_view(runtime), console.width))
        console.print(_spark_line(runtime))
        return
    views = _views(runtime)
    console.print(render_views(views, table_lags(runtime, views)))
    tracker = LagTracker(stale_after_s=args.stale_after)
    probe = ProducedProbe(runtime.bootstrap, runtime.kafka)

    def frame() -> Group:
        lags = collect_task_lags(runtime, args.stale_after, probe)
        table = render(lags, tracker.update(lags), job_view(runtime), console.width)
        return Group(table, _spark_line(runtime))

    try:
        with Live(frame(), console=console, auto_refresh=False) as live:
            while not stop.wait(args.interval):
                live.update(frame(), refresh=True)
    finally:
        probe.close()
