"""Profile the Spark correction: where its time goes, per step and per view.

    .venv/bin/python benchmarks/batch_profile.py [--events 1000000] [--hours 4]
        [--no-validate] [--no-warmup] [--no-components] [--markdown] [--event-log DIR]

Writes the synthetic archive of ``benchmarks/batch.py`` into a temporary directory, starts
Spark (``SLUICE_SPARK_*`` settings, default ``local[2]``) with its event log on, runs
``correct_hours`` over every hour for the shipped views once to warm the JVM, then once
profiled, as the CLI and the Dagster assets run it (``validate_rows`` =
``quality.schemas.validate_batch_rows``, pandas on the collected rows, unless ``--no-validate``).

Nothing in ``pipelines/`` is changed: the profiled run patches the steps
``pipelines.batch.windows`` calls, in this process only, to time each step and put its Spark jobs
in a job group (``SparkContext.setJobGroup``); the event log, read after ``spark.stop()``,
gives each group's jobs, stages, tasks and task time. The correction collects each view's
rows through Arrow before it validates them (in the driver), so the aggregation and the
collect are one step, timed apart from the pandera checks without any extra job.

Then (unless ``--no-components``) each aggregator of each view and each stage of ``top_k``
is run alone over the same cached, deduplicated events, to split the cost of a view's
``groupBy`` by aggregator (the event log cannot: it is one stage).

``--markdown`` prints the tables as Markdown (for docs/batch.md) instead of rich tables.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

from batch import make_events, write_archive
from rich.console import Console
from rich.table import Table
from spark_eventlog import GroupStats, read_event_log

import pipelines.batch.archive as archive
import pipelines.batch.correct as correct
import pipelines.batch.sessions as sessions
import pipelines.batch.windows as windows
from pipelines.batch import SparkSettings, build_spark
from pipelines.batch.frames import spark_frame_of
from pipelines.config import PROJECT_ROOT
from pipelines.kinds import by_kind
from pipelines.kinds.session import SESSIONS
from pipelines.kinds.windowed import WINDOWED
from pipelines.storage import LocalObjectStore
from pipelines.tables import TablesConfig, ViewTables
from pipelines.views import WINDOW_START, View, load_views
from pipelines.views.topics import declaration_of

WARMUP = "warm-up run"
OVERHEAD = "(outside any step)"


class Steps:
    """Consecutive labelled steps: wall time each, and each step's Spark jobs in its group."""

    def __init__(self, spark) -> None:
        self.sc = spark.sparkContext
        self.order: list[str] = []
        self.wall: dict[str, float] = {}
        self.extra_jobs = 0
        self._label: str | None = None
        self._since = 0.0

    def enter(self, label: str) -> None:
        self.stop()
        if label not in self.wall:
            self.order.append(label)
            self.wall[label] = 0.0
        self._label, self._since = label, time.perf_counter()
        self.sc.setJobGroup(label, label)

    def stop(self) -> None:
        if self._label is not None:
            self.wall[self._label] += time.perf_counter() - self._since
        self._label = None
        self.sc.setJobGroup(OVERHEAD, OVERHEAD)


def _patches(steps: Steps, validate: Callable | None) -> tuple[list, Callable | None]:
    """Wrap the private steps of ``correct_hours`` to mark where each one starts."""
    list_files, read, aggregate, publish = (
        windows.list_hour_files,
        windows.read_hours,
        windows.aggregate_window_views,
        windows.publish_versions,
    )

    def listing(*args, **kwargs):
        steps.enter("list archive files")
        return list_files(*args, **kwargs)

    def reading(*args, **kwargs):
        # Lazy: the jobs of this step are the stats collect that fills the cache.
        steps.enter("read + dedup + cache build (stats collect)")
        return read(*args, **kwargs)

    def aggregating(events, views, segments, validate_segment=None, validate_rows=None):
        names = " + ".join(view.name for view in views)
        steps.enter(f"{names}: plan + aggregate + Arrow collect")
        tables = aggregate(events, views, segments, validate_segment, validate_rows)
        steps.enter(f"{names}: write segments")
        return tables

    def validating(rows, view):
        steps.enter(f"{view.name}: validate (pandera, pandas)")
        validate(rows, view)
        steps.enter(f"{view.name}: cast + sort")

    def publishing(target, view, *args, **kwargs):
        steps.enter(f"{view.name}: write segments")
        return publish(target, view, *args, **kwargs)

    patched = [
        mock.patch.object(windows, "list_hour_files", listing),
        mock.patch.object(windows, "read_hours", reading),
        mock.patch.object(windows, "aggregate_window_views", aggregating),
        mock.patch.object(windows, "publish_versions", publishing),
    ]
    return patched, (validating if validate else None)


def profile_run(spark, store, tables, views, hours, validate) -> tuple[Steps, float]:
    steps = Steps(spark)
    patches, validating = _patches(steps, validate)
    with ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        started = time.perf_counter()
        correct.correct_hours(spark, store, views, hours, validate_rows=validating, tables=tables)
        total = time.perf_counter() - started
        steps.stop()
    return steps, total


# --- components: each aggregator alone ------------------------------------------------------


def _components(view: View) -> list[tuple[str, Callable]]:
    """(label, rows -> DataFrame) for the count-only baseline and each aggregator alone."""
    from pyspark.sql import functions as F

    keys = [WINDOW_START, *view.grouping_cols]
    count = F.count(F.lit(1)).alias(windows._EVENTS)
    out = [("groupBy keys, count only", lambda rows: rows.groupBy(*keys).agg(count))]
    for agg in view.aggregators:
        frame = spark_frame_of(agg)
        if frame is not None and agg.name == "top_k":
            item = F.col(agg.spec.col_name).cast("string").alias("item")
            out.append(
                (
                    f"{agg.name} stage 1: count per item",
                    lambda r, i=item: r.groupBy(*keys, i).count(),
                )
            )
        if frame is not None:
            out.append((f"{agg.name} ({agg.out}), its own frame", lambda r, f=frame: f(r, keys)))
            continue
        cols = agg.spark_columns(F.col("event_time"))
        out.append((f"{agg.name} ({agg.out})", lambda r, c=cols: r.groupBy(*keys).agg(count, *c)))
    return out


def _window_components(
    view, events, deduplicated_all, hours, repeat: int
) -> list[tuple[str, float]]:
    """Best-of-``repeat`` seconds of each of a windowed view's components over the cache."""
    from pyspark.sql import functions as F

    window = F.col("event_time") - F.col("event_time") % F.lit(view.interval_ms)
    rows = events.where(F.col("topic") == view.topic).withColumn(WINDOW_START, window)
    out = []
    for label, build in _components(view):
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            build(rows).toArrow()
            best = min(best, time.perf_counter() - started)
        out.append((f"{view.name}: {label}", best))
    return out


def _session_components(
    view, events, deduplicated_all, hours, repeat: int
) -> list[tuple[str, float]]:
    """No window: a session view's rows are cut into sessions first, from every archived
    column, so it is timed whole."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        sessions._aggregate_sessions(deduplicated_all, view, hours)
        best = min(best, time.perf_counter() - started)
    return [(f"{view.name}: read + sessionize + aggregate", best)]


COMPONENTS: dict[str, Callable[..., list[tuple[str, float]]]] = {
    WINDOWED.name: _window_components,
    SESSIONS.name: _session_components,
}
"""How each kind of view is split into components to time, by the kind's name."""


def profile_components(spark, store, views, hours, repeat: int = 2) -> list[tuple[str, float]]:
    """Seconds of reading and deduplicating with and without building the cache (once each),
    then best-of-``repeat`` seconds of each component over the events cached as the
    correction caches them (the windowed pass's cache: the columns its views read)."""
    from pyspark import StorageLevel

    used = {c for view in by_kind(views)[WINDOWED] for c in windows._columns_read(view)}
    keep = [
        "topic",
        "event_time",
        archive.COPIES,
        archive.HOUR,
        *sorted(used - {"topic", "event_time"}),
    ]
    listed = archive.list_hour_files(store, hours)
    deduplicated_all = archive.read_hours(spark, store, listed, "s3a", declaration_of(views[0]))
    deduplicated = deduplicated_all.select(*keep)
    spark.sparkContext.setJobGroup("components", "components")
    rows_out = []
    started = time.perf_counter()
    deduplicated.write.format("noop").mode("overwrite").save()
    rows_out.append(("read + dedup, no cache (noop write)", time.perf_counter() - started))
    events = deduplicated.persist(StorageLevel.MEMORY_AND_DISK)
    started = time.perf_counter()
    events.count()
    rows_out.append(("read + dedup + cache build (count)", time.perf_counter() - started))
    try:
        for view in views:
            profile = COMPONENTS[view.kind]
            rows_out += profile(view, events, deduplicated_all, hours, repeat)
    finally:
        events.unpersist()
    return rows_out


# --- report ---------------------------------------------------------------------------------


def _print(title: str, header: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print(f"\n**{title}**\n")
        print("| " + " | ".join(header) + " |")
        print("| " + " | ".join("---" for _ in header) + " |")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    table = Table(title=title)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=150).print(table)


def report(steps: Steps, total: float, groups: dict[str, GroupStats], markdown: bool) -> None:
    header = [
        "step",
        "jobs",
        "stages",
        "tasks",
        "wall s",
        "share",
        "Spark busy s",
        "task s",
        "task CPU s",
    ]
    rows, sums = [], GroupStats()
    for label in steps.order:
        g = groups.get(label, GroupStats())
        sums.jobs, sums.stages, sums.tasks = (
            sums.jobs + g.jobs,
            sums.stages + g.stages,
            sums.tasks + g.tasks,
        )
        sums.task_seconds += g.task_seconds
        sums.task_cpu_seconds += g.task_cpu_seconds
        busy = g.busy_seconds
        rows.append(
            [
                label,
                str(g.jobs),
                str(g.stages),
                str(g.tasks),
                f"{steps.wall[label]:.2f}",
                f"{steps.wall[label] / total:.0%}",
                f"{busy:.2f}",
                f"{g.task_seconds:.1f}",
                f"{g.task_cpu_seconds:.1f}",
            ]
        )
    other = total - sum(steps.wall.values())
    stray = [groups[g] for g in (OVERHEAD, "") if g in groups]  # jobs no step claimed
    rows.append(
        [
            OVERHEAD,
            str(sum(g.jobs for g in stray)),
            str(sum(g.stages for g in stray)),
            str(sum(g.tasks for g in stray)),
            f"{other:.2f}",
            f"{other / total:.0%}",
            "",
            "",
            "",
        ]
    )
    rows.append(
        [
            "total",
            str(sums.jobs),
            str(sums.stages),
            str(sums.tasks),
            f"{total:.2f}",
            "100%",
            "",
            f"{sums.task_seconds:.1f}",
            f"{sums.task_cpu_seconds:.1f}",
        ]
    )
    _print("Where the time goes (profiled run)", header, rows, markdown)

    per_view: dict[str, list[float]] = {}
    for label in steps.order:
        view = label.split(":", 1)[0] if ":" in label else "shared: list, read, dedup, cache"
        g = groups.get(label, GroupStats())
        acc = per_view.setdefault(view, [0, 0, 0, 0.0])
        acc[0] += g.jobs
        acc[1] += g.stages
        acc[2] += g.tasks
        acc[3] += steps.wall[label]
    _print(
        "Per view",
        ["view", "jobs", "stages", "tasks", "wall s", "share"],
        [
            [v, str(a[0]), str(a[1]), str(a[2]), f"{a[3]:.2f}", f"{a[3] / total:.0%}"]
            for v, a in per_view.items()
        ],
        markdown,
    )
    print(
        f"\nSpark jobs launched by the correction: {sums.jobs - steps.extra_jobs} "
        f"(+{steps.extra_jobs} added by the profiler), {sums.stages} stages run, "
        f"{sums.tasks} tasks, {sums.task_seconds:.1f} task-seconds ({sums.task_cpu_seconds:.1f} "
        f"of task CPU) in {total:.1f} s wall"
    )
    sites = {}
    for label in steps.order:
        for site, n in groups.get(label, GroupStats()).call_sites.items():
            sites[f"{label} <- {site}"] = n
    print("\nJobs by step and call site:")
    for site, n in sites.items():
        print(f"  {n:3d}  {site}")
    print("\nStages by step (stage id, tasks, task seconds, input records, operators):")
    for label in steps.order:
        for stage, tasks, seconds, records, ops in groups.get(label, GroupStats()).stage_detail:
            print(
                f"  {label}: stage {stage}, {tasks} tasks, {seconds:.2f} s, {records:,} in: {ops}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--hours", type=int, default=4, help="hours of event time")
    parser.add_argument("--views", default=str(PROJECT_ROOT / "data" / "views.yaml"))
    parser.add_argument("--no-validate", action="store_true", help="no validate_rows")
    parser.add_argument("--no-warmup", action="store_true", help="profile a cold JVM")
    parser.add_argument("--no-components", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--event-log", help="keep Spark's event log in this directory (history server format)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    views = load_views(args.views)
    validate = None
    if not args.no_validate:
        from quality.schemas import validate_batch_rows as validate
    workdir = Path(tempfile.mkdtemp(prefix="sluice-profile-"))
    log_dir = Path(args.event_log).resolve() if args.event_log else workdir / "eventlog"
    log_dir.mkdir(parents=True, exist_ok=True)
    base = SparkSettings()
    conf = {
        **base.conf,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": log_dir.as_uri(),
        "spark.eventLog.compress": "false",
    }
    settings = base.model_copy(update={"conf": conf})
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; Spark master {settings.master}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    spark = None
    try:
        root = workdir / "archive"
        hours = write_archive(root, make_events(args.events, args.hours))
        store = LocalObjectStore(root)
        tables = ViewTables(TablesConfig(str(root), catalog_url=f"sqlite:///{root}/catalog.db"))
        spark = build_spark(settings)
        print(f"Spark {spark.version}, {args.events:,} events, {len(hours)} hours")
        if not args.no_warmup:
            spark.sparkContext.setJobGroup(WARMUP, WARMUP)
            started = time.perf_counter()
            correct.correct_hours(spark, store, views, hours, validate_rows=validate, tables=tables)
            print(f"warm-up correction: {time.perf_counter() - started:.1f} s")
        steps, total = profile_run(spark, store, tables, views, hours, validate)
        components = []
        if not args.no_components:
            components = profile_components(spark, store, views, hours)
        print(f"load average after the runs: {os.getloadavg()[0]:.1f}")
        spark.stop()
        spark = None
        report(steps, total, read_event_log(log_dir), args.markdown)
        if components:
            _print(
                "Each component alone (aggregations: over the cached events, best of 2)",
                ["component", "wall s"],
                [[label, f"{s:.2f}"] for label, s in components],
                args.markdown,
            )
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
