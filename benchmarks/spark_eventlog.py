"""Read a Spark event log (``spark.eventLog.enabled=true``) back into per-job-group numbers.

Spark writes one JSON event per line; every job and stage carries the local properties of
the thread that launched it, so ``SparkContext.setJobGroup(group, ...)`` around a step is
enough to attribute its jobs, stages and tasks afterwards. Used by ``batch_profile.py``.

Read the log after ``spark.stop()``: only then is it complete (and renamed from
``*.inprogress``). Start the session with ``spark.eventLog.compress=false`` so it is plain
JSON lines.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["GroupStats", "read_event_log"]

GROUP = "spark.jobGroup.id"
NO_SITE = "(no Python call site recorded: count(), or a query stage AQE submitted)"


@dataclass
class GroupStats:
    """What Spark ran for one job group."""

    jobs: int = 0
    stages: int = 0
    """Stages that ran (submitted); stages skipped because their shuffle output existed are not."""
    skipped_stages: int = 0
    tasks: int = 0
    task_seconds: float = 0.0
    """Sum of the tasks' executor run time: work done, whatever the parallelism."""
    task_cpu_seconds: float = 0.0
    """Sum of the tasks' executor CPU time: on a shared machine, steadier than run time."""
    intervals: list[tuple[float, float]] = field(default_factory=list)
    """(submitted, completed) epoch seconds of each job."""
    call_sites: dict[str, int] = field(default_factory=dict)
    """Jobs per call site (the Python line that triggered them, per PySpark)."""
    stage_detail: list[tuple[int, int, float, int, str]] = field(default_factory=list)
    """(stage id, tasks, task seconds, input records, operators) of each stage that ran.

    The operators are those of every RDD in the stage, the lineage behind a cached RDD
    included even when the cache served it: input records tell (a Parquet scan reads rows,
    the in-memory cache counts column batches)."""

    @property
    def busy_seconds(self) -> float:
        """Wall time during which at least one job of the group ran (union of intervals)."""
        total, end = 0.0, float("-inf")
        for start, stop in sorted(self.intervals):
            if stop <= end:
                continue
            total += stop - max(start, end)
            end = stop
        return total


def _order(path: Path) -> tuple[str, int]:
    # Spark 4 rolls the log by default: eventlog_v2_<app>/events_<n>_<app>, in order of n.
    head, _, rest = path.name.partition("_")
    index = rest.partition("_")[0]
    return (str(path.parent), int(index) if head == "events" and index.isdigit() else 0)


def _events(directory: Path):
    paths = [
        p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(("appstatus", "."))
    ]
    for path in sorted(paths, key=_order):
        with path.open() as lines:
            for line in lines:
                yield json.loads(line)


def _operators(stage_info: dict) -> str:
    """The distinct Spark plan operators a stage ran, e.g. "Scan parquet, Exchange"."""
    names: list[str] = []
    for rdd in reversed(stage_info.get("RDD Info", [])):
        scope = rdd.get("Scope")
        name = json.loads(scope).get("name", "") if scope else ""
        name = name.split(" (")[0].strip()  # "WholeStageCodegen (3)" -> "WholeStageCodegen"
        if name and name not in names:
            names.append(name)
    return ", ".join(names)


def read_event_log(directory: str | Path) -> dict[str, GroupStats]:
    """Per job group (``""`` for jobs without one): jobs, stages, tasks and their times."""
    stats: dict[str, GroupStats] = defaultdict(GroupStats)
    job_group: dict[int, str] = {}
    job_stages: dict[int, set[int]] = {}
    stage_group: dict[int, str] = {}
    ran: set[tuple[int, int]] = set()
    started: dict[int, float] = {}
    per_stage: dict[int, list] = defaultdict(lambda: [0, 0.0, 0])
    for event in _events(Path(directory)):
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            job = event["Job ID"]
            group = (event.get("Properties") or {}).get(GROUP, "")
            job_group[job] = group
            job_stages[job] = set(event.get("Stage IDs", []))
            started[job] = event["Submission Time"] / 1000
            site = (event.get("Properties") or {}).get("callSite.short", NO_SITE)
            g = stats[group]
            g.jobs += 1
            g.call_sites[site] = g.call_sites.get(site, 0) + 1
        elif kind == "SparkListenerJobEnd":
            job = event["Job ID"]
            g = stats[job_group.get(job, "")]
            g.intervals.append(
                (started.pop(job, event["Completion Time"] / 1000), event["Completion Time"] / 1000)
            )
        elif kind == "SparkListenerStageSubmitted":
            info = event["Stage Info"]
            group = (event.get("Properties") or {}).get(GROUP, "")
            stage_group[info["Stage ID"]] = group
            key = (info["Stage ID"], info["Stage Attempt ID"])
            if key not in ran:
                ran.add(key)
                stats[group].stages += 1
        elif kind == "SparkListenerTaskEnd":
            g = stats[stage_group.get(event["Stage ID"], "")]
            g.tasks += 1
            metrics = event.get("Task Metrics") or {}
            g.task_seconds += metrics.get("Executor Run Time", 0) / 1000
            g.task_cpu_seconds += metrics.get("Executor CPU Time", 0) / 1e9
            per_stage[event["Stage ID"]][0] += 1
            per_stage[event["Stage ID"]][1] += metrics.get("Executor Run Time", 0) / 1000
            per_stage[event["Stage ID"]][2] += metrics.get("Input Metrics", {}).get(
                "Records Read", 0
            )
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stage = info["Stage ID"]
            tasks, seconds, records = per_stage[stage]
            stats[stage_group.get(stage, "")].stage_detail.append(
                (stage, tasks, seconds, records, _operators(info))
            )
    submitted = {stage for stage, _attempt in ran}
    for job, stages in job_stages.items():
        stats[job_group[job]].skipped_stages += len(stages - submitted)
    return dict(stats)
