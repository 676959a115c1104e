"""Profile one worker's processing: where its time goes, with the example views.

    .venv/bin/python benchmarks/ingest_profile.py [--events 300000] [--no-sessions] [--top 25]

Generates ``--events`` messages in memory (the generator of ``benchmarks/ingest.py``, no
broker), cuts them into 4 partitions by key and into batches of ``SLUICE_POLL_MAX_RECORDS`` (what
librdkafka's reader hands a task: a partition's fetch at a time, up to a whole poll), and runs
the stream tasks of the example views (``data/views.yaml``) over them under
cProfile, flushing every 100k records and checkpointing at the end, as a worker does. Prints
the share of the wall time of decode, each view's state update (windowing and every
aggregator's update), archive buffering and flush (archive write, segments), and the top
functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import pstats
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.events.decode import RecordBatch
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kinds import kind_of
from pipelines.kinds.session import SESSIONS
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.stream.worker import tune_collector
from pipelines.views import load_views

PARTITIONS = 4
BATCH = SluiceSettings().poll_max_records


class _NoDeadLetters:
    def send(self, *_args: object) -> None:
        pass

    def flush(self) -> None:
        pass


def generated_batches(events: int) -> dict[int, list[RecordBatch]]:
    """``events`` generated messages as the reader would hand them over, per partition."""
    rows: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    options = GeneratorOptions(max_events=events, peak_rate=50_000, speedup=60)

    def send(m) -> None:
        p = zlib.crc32(m.key or b"") % PARTITIONS
        rows[p].append((m.key, m.value))

    replay(load_trace("nyc_taxi"), options, send, pace=False)
    out: dict[int, list[RecordBatch]] = {}
    base = 1_700_000_000_000
    for p, items in sorted(rows.items()):
        out[p] = []
        for lo in range(0, len(items), BATCH):
            part = items[lo : lo + BATCH]
            n = len(part)
            out[p].append(
                RecordBatch(
                    list(range(lo, lo + n)),
                    [base + lo + i for i in range(n)],
                    [v for _, v in part],
                    [k for k, _ in part],
                )
            )
    return out


def run(batches: dict[int, list[RecordBatch]], views, flush_every: int = 100_000) -> dict:
    """Process every batch with ``views``; the tasks' own timings and the wall time."""
    with tempfile.TemporaryDirectory() as state:
        settings = SluiceSettings(state_dir=Path(state))
        store = LocalObjectStore(settings.resolved_storage_root)
        tasks = {
            p: StreamTask("events", p, views, store, _NoDeadLetters(), settings) for p in batches
        }
        for task in tasks.values():
            task.start_at(0)
        flush_s = 0.0
        started = time.perf_counter()
        since = 0
        rounds = max(len(b) for b in batches.values())
        for i in range(rounds):
            for p, task in tasks.items():
                if i < len(batches[p]):
                    task.process(batches[p][i])
                    since += len(batches[p][i])
            if since >= flush_every:
                t = time.perf_counter()
                for task in tasks.values():
                    task.flush()
                flush_s += time.perf_counter() - t
                since = 0
        t = time.perf_counter()
        for task in tasks.values():
            task.checkpoint()
        flush_s += time.perf_counter() - t
        wall = time.perf_counter() - started
        seconds = defaultdict(float)
        for task in tasks.values():
            for k, v in task.seconds.items():
                seconds[k] += v
        return {"wall": wall, "flush": flush_s, **seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--no-sessions", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    left_out = {SESSIONS} if args.no_sessions else set()
    views = [
        v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if kind_of(v) not in left_out
    ]
    batches = generated_batches(args.events)
    tune_collector()  # as StreamWorker.run does
    total = sum(len(b) for bs in batches.values() for b in bs)
    print(f"machine: {platform.platform()}, Python {platform.python_version()}")
    import os

    print(f"load average at start: {os.getloadavg()}")
    plain = run(batches, views)
    print(f"{total:,} events, not profiled: {total / plain['wall']:,.0f} msg/s")
    profile = cProfile.Profile()
    profile.enable()
    timed = run(batches, views)
    profile.disable()
    wall = timed["wall"]
    stats = pstats.Stats(profile)
    # per view state update and per aggregator update, cumulative
    by_func: dict[str, float] = defaultdict(float)
    for (filename, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        by_func[f"{Path(filename).name}:{name}"] += ct
    print(f"profiled run: {wall:.2f} s wall ({total / wall:,.0f} msg/s under cProfile)")
    print("| part | seconds | share |")
    print("|---|---:|---:|")
    for part in ("decode", "aggregate", "archive"):
        print(f"| {part} (task timers) | {timed[part]:.2f} | {timed[part] / wall:.0%} |")
    print(f"| flush + checkpoint | {timed['flush']:.2f} | {timed['flush'] / wall:.0%} |")
    interesting = [
        k
        for k in by_func
        if k.split(":")[1] in ("update", "_groups", "settle", "segment_table", "write", "add")
        and k.split(":")[0]
        in (
            "builtin.py",
            "statistics.py",
            "sketches.py",
            "picks.py",
            "state.py",
            "sessions.py",
            "writer.py",
        )
    ]
    for k in sorted(interesting, key=lambda k: -by_func[k]):
        print(f"| {k} (cumulative) | {by_func[k]:.2f} | {by_func[k] / wall:.0%} |")
    print()
    stats.sort_stats("tottime").print_stats(args.top)
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
