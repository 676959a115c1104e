"""Rescale pause benchmark: what a real rescale stops, and the pause model fitted from it.

Runs real `sluice agent` processes on the embedded broker over a pre-produced topic (each
agent rate-capped so the replay lasts the whole run, with the shipped example views), then
rescales the fleet through a sequence of agent counts: up by starting agents, down by
stopping them gracefully (SIGTERM: checkpoint, release). The coordinator records each rescale
(`rescales` in the control store: tasks moved, state moved, wall pause, the time the moved
tasks stood still); this prints them, the pause model the autoscaler sensor would fit from them, and
the configured default next to it. Then it times the state-dependent part alone (a final
checkpoint and its restore, for growing numbers of groups), since the fleet's states are too
small to tell it from the per-task part. Writes ``benchmarks/out/rescale_pause.json``.

    .venv/bin/python benchmarks/rescale_pause.py [--partitions 12] [--counts 1,2,4,6,3,1,4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from orchestration.control_plane.autoscaling.config import FleetSettings  # noqa: E402
from orchestration.control_plane.autoscaling.pause import PauseModel, fit_pause  # noqa: E402
from orchestration.control_plane.processes import start_process, stop_process  # noqa: E402
from pipelines.config import PROJECT_ROOT  # noqa: E402
from pipelines.control import ControlStore  # noqa: E402
from pipelines.generator import GeneratorOptions, load_trace, replay  # noqa: E402
from pipelines.kafka import EmbeddedBroker, ensure_topics, producer  # noqa: E402
from pipelines.segments.parquet import read_parquet, to_parquet  # noqa: E402
from pipelines.storage.local import LocalObjectStore  # noqa: E402
from pipelines.stream.checkpoint import TaskCheckpoint, load_checkpoint, save_checkpoint  # noqa: E402
from pipelines.stream.state import WindowState  # noqa: E402
from pipelines.views.loader import parse_views  # noqa: E402
from tests.fixtures.processes import wait_until  # noqa: E402 - the tests' deadline wait

TOPIC = "rescale-events"
PROBE_VIEW = {
    "name": "by_client",
    "topic": TOPIC,
    "grouping_cols": ["client"],
    "interval": "1h",
    "aggregation_info": [
        {"aggregation": "count", "aggregated_col_name": "events"},
        {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
        {"aggregation": "max", "col_name": "bytes_tx", "aggregated_col_name": "bytes_max"},
        {
            "aggregation": "approx_count_distinct",
            "col_name": "session_id",
            "aggregated_col_name": "sessions",
            "params": {"lg_k": 8},
        },
    ],
}


def probe_state(keys: int) -> tuple[float, float]:
    """(MB, seconds) of the state-dependent part of a move, alone: the old owner's final
    checkpoint of ``keys`` groups and the new owner's restore of it, on local storage."""
    (view,) = parse_views({"views": [PROBE_VIEW]})
    state = WindowState(view)
    bucket = {}
    for k in range(keys):
        row = []
        for agg in state.aggregators:
            kind = agg.spec.aggregation
            values = None if kind == "count" else np.array([float(k % 977 + 1)])
            if kind == "approx_count_distinct":
                values = np.array([f"s{k}", f"t{k}"], dtype=object)
            times = np.zeros(1 if values is None else len(values), dtype=np.int64)
            row.append(agg.update(agg.initialize(), values, times))
        bucket[(0, f"client-{k:08d}")] = row
    state.buckets[0] = bucket
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalObjectStore(tmp)
        started = time.perf_counter()
        data = to_parquet(state.all_table())
        checkpoint = TaskCheckpoint(TOPIC, 0, 1, 0, 0, {}, {}, {view.name: data}, 1)
        save_checkpoint(store, checkpoint)
        restored = load_checkpoint(store, TOPIC, 0)
        assert restored is not None
        WindowState(view).load(read_parquet(restored.states[view.name]))
        return len(data) / 1e6, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--counts", default="1,2,4,6,3,1,3,6,2", help="agent counts in turn")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="msg/s cap per agent")
    parser.add_argument(
        "--heavy-state",
        action="store_true",
        help="add a view per session and day, whose state grows through the run (MBs a task)",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = EmbeddedBroker(work / "broker")
        bootstrap = broker.start().bootstrap
        processes: dict[str, object] = {}
        control = None
        try:
            ensure_topics(bootstrap, {TOPIC: args.partitions, f"{TOPIC}.dlq": 1})
            out = producer(bootstrap, max_request_size=4 * 1024 * 1024)
            options = GeneratorOptions(seed=5, max_events=args.events, peak_rate=40_000)
            replay(
                load_trace("nyc_taxi"),
                options,
                lambda m: out.send(TOPIC, key=m.key, value=m.value),
                pace=False,
            )
            out.flush()
            out.close()
            views = yaml.safe_load((PROJECT_ROOT / "data" / "views.yaml").read_text())
            if args.heavy_state:
                views["views"].append(
                    {
                        "name": "bytes_by_session_daily",
                        "topic": TOPIC,
                        "grouping_cols": ["session_id", "client"],
                        "interval": "1d",
                        "aggregation_info": [
                            {"aggregation": "count", "aggregated_col_name": "events"},
                            {
                                "aggregation": "sum",
                                "col_name": "bytes_tx",
                                "aggregated_col_name": "bytes",
                            },
                        ],
                    }
                )
            for view in views["views"]:
                view["topic"] = TOPIC
            views_file = work / "views.yaml"
            views_file.write_text(yaml.safe_dump(views))
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "SLUICE_CONTROL_STORE_URL": f"sqlite:///{work / 'control.db'}",
                "SLUICE_STORAGE_ROOT": str(work / "storage"),
                "SLUICE_DEAD_LETTER_TOPIC": f"{TOPIC}.dlq",
                "SLUICE_FLUSH_INTERVAL_S": "5",
                "SLUICE_CHECKPOINT_INTERVAL_S": "10",
                "SLUICE_STATUS_INTERVAL_S": "1",
                "SLUICE_WORKER_MAX_RATE": str(args.rate),
            }
            control = ControlStore(env["SLUICE_CONTROL_STORE_URL"])

            def start(agent_id: str) -> None:
                command = [sys.executable, "-m", "orchestration.cli", "agent", "--id", agent_id]
                command += ["--topic", TOPIC, "--views", str(views_file)]
                agent_env = {**env, "SLUICE_STATE_DIR": str(work / agent_id)}
                processes[agent_id] = start_process(command, agent_env, work / f"{agent_id}.log")

            def settled(n: int) -> bool:
                owners = [
                    a.agent_id for a in control.jobs.assignments(TOPIC) if a.state == "Running"
                ]
                live = {a for a, p in processes.items() if p.poll() is None}
                loads = [owners.count(a) for a in live]
                return (
                    len(owners) == args.partitions
                    and set(owners) <= live
                    and len(live) == n
                    and max(loads) - min(loads) <= 1
                )

            current = 0
            for n in counts:
                recorded = len(control.rescales.recent(TOPIC, 1000))
                if n > current:
                    for i in range(current, n):
                        start(f"a{i}")
                else:
                    for i in range(n, current):
                        processes[f"a{i}"].send_signal(signal.SIGTERM)
                    for i in range(n, current):
                        stop_process(processes.pop(f"a{i}"), timeout_s=60)
                if current > 0:
                    wait_until(
                        lambda r=recorded: len(control.rescales.recent(TOPIC, 1000)) > r,
                        180,
                        f"the rescale {current} -> {n} to be recorded",
                    )
                wait_until(lambda n=n: settled(n), 180, f"{n} agents running every task")
                console.print(f"{current} -> {n} agents: settled")
                current = n
                time.sleep(3)  # let the new owners checkpoint and report their state size
            records = control.rescales.recent(TOPIC, 1000)  # not the teardown's stops
        finally:
            for process in processes.values():
                stop_process(process, timeout_s=30)
            if control is not None:
                control.close()
            broker.stop()

    table = Table(
        title=f"rescales of {args.partitions} tasks (agents capped at {args.rate:g} msg/s)"
    )
    for name in ("from", "to", "tasks moved", "state MB", "pause s", "task pause s", "per task s"):
        table.add_column(name, justify="right")
    for r in records:
        table.add_row(
            str(r.from_agents),
            str(r.to_agents),
            str(r.tasks_moved),
            f"{r.state_mb:.2f}",
            f"{r.pause_s:.2f}",
            f"{r.task_pause_s:.2f}",
            f"{r.task_pause_s / max(r.tasks_moved, 1):.2f}",
        )
    console.print(table)
    default = PauseModel.from_settings(FleetSettings())
    fitted = fit_pause(records, default, min_records=3)
    per_task = [r.task_pause_s / r.tasks_moved for r in records if r.tasks_moved]
    console.print(f"configured default: {default.describe()}")
    console.print(f"fitted: {fitted.describe()}")
    if per_task:
        console.print(
            f"per moved task: median {statistics.median(per_task):.2f} s, "
            f"max {max(per_task):.2f} s over {len(per_task)} rescales"
        )
    probes = [probe_state(keys) for keys in (10_000, 40_000, 160_000)]
    for mb, seconds in probes:
        console.print(
            f"state alone: checkpoint + restore of {mb:.2f} MB took {seconds:.2f} s "
            f"({seconds / mb:.2f} s/MB)"
        )
    figures = {
        "machine": f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()})",
        "partitions": args.partitions,
        "records": [r.__dict__ for r in records],
        "fitted": fitted.__dict__,
        "default": default.__dict__,
        "state_probe_mb_s": probes,
    }
    target = ROOT / "benchmarks" / "out" / "rescale_pause.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(figures, indent=2))
    console.print(f"figures in {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
