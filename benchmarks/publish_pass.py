"""Publisher pass benchmark: what one realtime publisher pass costs on a long catch-up.

A new leader's first pass (or a pass after tasks restarted and rewrote their hours) merges
and commits every hour of every view. This streams ``--events`` generated events spread over
about ``--hours`` hours of event time (4 partitions, the example views) into a local store,
then times a first pass of :class:`pipelines.serving.publisher.RealtimePublisher` into fresh
tables: wall seconds, the publisher thread's CPU and the process's CPU (pyiceberg's worker
threads included), per view-hour committed.

Beside it, in the same process and on the same store, the baseline: the pass as it read and
committed before (each realtime file read through ``pq.read_table``'s dataset layer, each
committed file's Iceberg entry made by pyiceberg's ``parquet_file_to_data_file``, which reads
the file back and checks its schema). Runs alternate, best of ``--repeat``.

    .venv/bin/python benchmarks/publish_pass.py [--events 100000] [--hours 115] [--repeat 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402
from pyiceberg.io.pyarrow import parquet_file_to_data_file  # noqa: E402

import pipelines.serving.publisher as publisher_module  # noqa: E402
import pipelines.tables.commit as commit_module  # noqa: E402
from pipelines.config import PROJECT_ROOT  # noqa: E402
from pipelines.generator import GeneratorOptions  # noqa: E402
from pipelines.serving.publisher import RealtimePublisher  # noqa: E402
from pipelines.tables import TablesConfig, ViewTables  # noqa: E402
from pipelines.testing import run_stream  # noqa: E402
from pipelines.views import load_views  # noqa: E402


@contextlib.contextmanager
def baseline() -> Iterator[None]:
    """The pass's reads and entries as they were made before (see the module's docstring)."""
    read, entries = publisher_module.read_parquet, commit_module._data_files

    def read_table(data: bytes, columns=None):
        return pq.read_table(io.BytesIO(data), columns=list(columns) if columns else None)

    def per_file(table, metadata, written):
        return [parquet_file_to_data_file(table.io, metadata, w.path) for w in written]

    publisher_module.read_parquet, commit_module._data_files = read_table, per_file
    try:
        yield
    finally:
        publisher_module.read_parquet, commit_module._data_files = read, entries


def one_pass(store, views, tmp: Path, name: str) -> dict:
    tables = ViewTables(
        TablesConfig(warehouse=str(tmp / name), catalog_url=f"sqlite:///{tmp / name}-catalog.db")
    )
    publisher = RealtimePublisher(store, tables, views)
    started, cpu = time.monotonic(), time.process_time()
    result = publisher.publish_once()
    out = {
        "wall": time.monotonic() - started,
        "process_cpu": time.process_time() - cpu,
        "thread_cpu": result.cpu_seconds,
        "view_hours": sum(len(h) for h in result.committed.values()),
    }
    tables.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--hours", type=float, default=115.0, help="event-time span, about")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    # the generator's trace spans a fixed event time per event; the speedup spreads it
    speedup = 2880.0 * args.hours / 115.0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        run = run_stream(
            tmp / "root",
            views,
            options=GeneratorOptions(max_events=args.events, speedup=speedup),
            trace="nyc_taxi",
        )
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f}; {args.events} events, {len(run.event_hours())} event "
            f"hours, {len(views)} views"
        )
        best: dict[str, dict] = {}
        for i in range(args.repeat):
            for name in ("now", "baseline"):
                with baseline() if name == "baseline" else contextlib.nullcontext():
                    figures = one_pass(run.store, views, tmp, f"{name}-{i}")
                if name not in best or figures["wall"] < best[name]["wall"]:
                    best[name] = figures
        for name, f in best.items():
            per = 1000 * f["process_cpu"] / max(f["view_hours"], 1)
            print(
                f"{name:>8}: first pass {f['wall']:.2f} s wall, {f['thread_cpu']:.2f} s publisher "
                f"thread CPU, {f['process_cpu']:.2f} s process CPU for {f['view_hours']} "
                f"view-hours ({per:.1f} ms CPU each)"
            )
        now, base = best["now"], best["baseline"]
        print(
            f"ratio now/baseline: wall {now['wall'] / base['wall']:.2f}x, process CPU "
            f"{now['process_cpu'] / base['process_cpu']:.2f}x (load average now "
            f"{os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
