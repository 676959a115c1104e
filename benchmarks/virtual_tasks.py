"""Virtual tasks benchmark: does running more workers than partitions add throughput?

On one topic of 4 partitions of the embedded broker (the generator keys records by org) and
the example windowed views, in one process run:
  (a) 4 worker processes, one whole partition each (4 tasks);
  (b) 8 worker processes, each running 2 of the 16 key buckets of factor 4 (worker k gets two
      buckets of partition k // 2, so a partition is read by two workers and its two buckets on
      one worker share that read);
and prints for each the wall-clock throughput (the workers start reading at once, after their
imports; until the last record of the topic is processed), the CPU seconds the workers used
while running and the CPU time per record kept. A bucket reads its whole partition and keeps a
quarter of it, so (b) does more work per record; on a machine with fewer cores than workers
the wall clock cannot improve, so the benchmark also projects (b) against (a) on a machine
with a core per worker: the topic over the busiest worker's CPU time. Finally the cost of
the key hash per record (XXH64 of each real key, ``key_hashes``), next to what a whole
partition's task spends per record.

``--task-only`` measures one task in this process instead, no broker: the records of one
partition read by a whole task, and by bucket 0 of factor 2, which decodes every record (its
sibling's too: its watermark is the partition's) and keeps its own; beside it, what a bucket
did before it kept the partition's watermark, rebuilt here: hash the keys, keep the bucket's
records, decode and fold only those (and the same for factor 4). Each in msg/s of the partition read, best of
``--repeat`` interleaved runs.

    .venv/bin/python benchmarks/virtual_tasks.py [--events 400000] [--repeat 1] [--task-only]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.config import PROJECT_ROOT, KafkaSettings, SluiceSettings
from pipelines.events.decode import RecordBatch
from pipelines.generator import GeneratorOptions, load_trace, replay, synthesize
from pipelines.kafka import EmbeddedBroker, ensure_topics
from pipelines.kafka.writer import open_writer
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.stream.buckets import key_hashes
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views

PARTITIONS = 4
FACTOR = 4
TOPIC = "vt-bench"


def _views_file(directory: Path) -> Path:
    """The example views without the session view (a topic with one is never split)."""
    import yaml

    document = yaml.safe_load((PROJECT_ROOT / "data" / "views.yaml").read_text())
    document["views"] = [v for v in document["views"] if v.get("kind") != "session"]
    for view in document["views"]:
        view["topic"] = TOPIC
    path = directory / "views.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _worker(
    bootstrap: str,
    tasks: list[TaskId],
    views_file: str,
    state: str,
    out: mp.Queue,
    start: threading.Barrier,
) -> None:
    """One worker process: run ``tasks`` until the topic is done, report what it cost."""
    settings = SluiceSettings(
        state_dir=Path(state),
        flush_interval_s=5.0,
        checkpoint_interval_s=5.0,
        dead_letter_topic=f"{TOPIC}.dlq",
    )
    worker = StreamWorker(
        f"w{os.getpid()}",
        tasks,
        load_views(views_file),
        settings,
        open_worker_clients(bootstrap, KafkaSettings(client="confluent"), TOPIC),
        LocalObjectStore(settings.resolved_storage_root),
    )
    start.wait()  # every worker imported and built: they read from the same instant
    began, cpu = time.time(), time.process_time()
    worker.run(max_idle_s=1.5)  # ends after its final checkpoint, once the topic is read
    cpu = time.process_time() - cpu  # every thread of the process, the idle polls too
    last = time.time() - (time.monotonic() - (worker.last_progress_at or time.monotonic()))
    tasks_run = worker.tasks
    out.put(
        {
            "began": began,
            "last": last,
            "cpu_s": cpu,
            "kept": sum(t.kept for t in tasks_run.values()),
            "seen": sum(t.seen for t in tasks_run.values()),
            "fetched": sum(  # buckets of one partition on one worker share its reads
                max(t.seen for t in tasks_run.values() if t.partition == p)
                for p in {t.partition for t in tasks_run.values()}
            ),
            "hash_s": worker.seconds["hash"] + sum(t.seconds["hash"] for t in tasks_run.values()),
        }
    )


def run_fleet(bootstrap: str, plan: list[list[TaskId]], views_file: Path, total: int) -> dict:
    """Start one process per worker at once; the fleet's figures once all have finished."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    start = ctx.Barrier(len(plan))
    with tempfile.TemporaryDirectory() as state:
        processes = [
            ctx.Process(
                target=_worker,
                args=(bootstrap, tasks, str(views_file), f"{state}/{i}", out, start),
            )
            for i, tasks in enumerate(plan)
        ]
        for process in processes:
            process.start()
        results = [out.get(timeout=600) for _ in processes]
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    kept = sum(r["kept"] for r in results)
    wall = max(r["last"] for r in results) - min(r["began"] for r in results)
    if kept != total:
        raise RuntimeError(f"the fleet kept {kept:,} records of {total:,}")
    busiest = max(r["cpu_s"] for r in results)
    return {
        "workers": len(plan),
        "tasks": sum(map(len, plan)),
        "wall_s": wall,
        "rate": total / wall,
        "cpu_s": sum(r["cpu_s"] for r in results),
        "busiest_cpu_s": busiest,
        "projected_rate": total / busiest,
        "cpu_us_per_kept": 1e6 * sum(r["cpu_s"] for r in results) / kept,
        "read_amplification": sum(r["fetched"] for r in results) / kept,
        "busiest_share": max(r["kept"] for r in results) / (kept / len(results)),
        "hash_ns_per_seen": 1e9
        * sum(r["hash_s"] for r in results)
        / sum(r["seen"] for r in results),
    }


def hash_cost(events: int) -> float:
    """ns per record of ``key_hashes`` over the generator's real keys."""
    messages = synthesize(load_trace("nyc_taxi"), GeneratorOptions(max_events=events))
    keys = [m.key for m in messages]
    offsets = list(range(len(keys)))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        key_hashes(keys, offsets)
        best = min(best, time.perf_counter() - started)
    return best / len(keys) * 1e9


def _batches(options: GeneratorOptions, size: int = 2_000) -> list[RecordBatch]:
    """One partition of the generator's records (keyed by org), cut as a poll cuts them."""
    messages = list(
        synthesize(
            load_trace("nyc_taxi"),
            options,
        )
    )
    out = []
    for lo in range(0, len(messages), size):
        part = messages[lo : lo + size]
        offsets = list(range(lo, lo + len(part)))
        out.append(
            RecordBatch(
                offsets,
                [1_000 + o for o in offsets],
                [m.value for m in part],
                [m.key for m in part],
            )
        )
    return out


def _run_task(
    batches: list[RecordBatch], views_file: Path, bucket: int, factor: int, own: bool
) -> tuple[float, float]:
    """Seconds one task takes to process ``batches``, and the share of the records it kept;
    ``own``: as a bucket did before it kept
    the partition's watermark (hash, keep its records, decode and fold those only)."""
    views = load_views(views_file)
    with tempfile.TemporaryDirectory() as tmp:
        settings = SluiceSettings(state_dir=Path(tmp))
        store = LocalObjectStore(Path(tmp) / "store")
        whole = own or factor == 1
        task = StreamTask(
            TOPIC,
            0,
            views,
            store,
            CollectingDeadLetters(),
            settings,
            bucket=0 if whole else bucket,
            factor=1 if whole else factor,
        )
        task.start_at(0)
        started = time.perf_counter()
        for batch in batches:
            if own:
                hashes = key_hashes(batch.keys, batch.offsets)
                index = (hashes % factor == bucket).nonzero()[0].tolist()
                batch = batch.take(index)
            task.process(batch)
        seconds = time.perf_counter() - started
    return seconds, task.kept / sum(map(len, batches))


def task_cost(options: GeneratorOptions, repeat: int) -> None:
    """Print msg/s of a whole task, and of a bucket of factor 2 and 4, now and as before."""
    batches = _batches(options)
    n = sum(map(len, batches))
    with tempfile.TemporaryDirectory() as tmp:
        views_file = _views_file(Path(tmp))
        runs = {
            "whole task (factor 1)": (0, 1, False),
            "bucket 0 of 2, every record decoded": (0, 2, False),
            "bucket 0 of 2, its own records decoded (before)": (0, 2, True),
            "bucket 0 of 4, every record decoded": (0, 4, False),
            "bucket 0 of 4, its own records decoded (before)": (0, 4, True),
        }
        best = dict.fromkeys(runs, (float("inf"), 0.0))
        for _ in range(repeat):
            for name, (bucket, factor, own) in runs.items():
                best[name] = min(best[name], _run_task(batches, views_file, bucket, factor, own))
    whole = best["whole task (factor 1)"][0]
    for name, (seconds, kept) in best.items():
        print(
            f"{name}: {n / seconds:,.0f} msg/s of the partition read "
            f"({seconds / whole:.2f}x the whole task's time), keeping {kept:.0%} of it"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--key-skew",
        type=float,
        default=GeneratorOptions.key_skew,
        help="Zipf exponent of the org keys (0 = uniform); a hot key stays in one bucket",
    )
    parser.add_argument(
        "--orgs", type=int, default=GeneratorOptions.orgs, help="distinct keys (organisations)"
    )
    parser.add_argument(
        "--task-only", action="store_true", help="one task in this process: whole vs bucket"
    )
    args = parser.parse_args()
    options = GeneratorOptions(
        max_events=args.events,
        peak_rate=50_000,
        speedup=60,
        key_skew=args.key_skew,
        orgs=args.orgs,
    )
    if args.task_only:
        task_cost(options, args.repeat)
        return 0
    whole = [[TaskId(TOPIC, p)] for p in range(PARTITIONS)]
    buckets = [
        [TaskId(TOPIC, k // 2, b, FACTOR) for b in (2 * (k % 2), 2 * (k % 2) + 1)]
        for k in range(2 * PARTITIONS)
    ]
    print(
        f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        broker = EmbeddedBroker(Path(tmp))
        info = broker.start()
        try:
            ensure_topics(info.bootstrap, {TOPIC: PARTITIONS, f"{TOPIC}.dlq": 1})
            writer = open_writer(info.bootstrap, KafkaSettings(client="confluent"))
            report = replay(
                load_trace("nyc_taxi"),
                options,
                lambda m: writer.send(TOPIC, m.key, m.value),
                pace=False,
            )
            writer.flush()
            writer.close()
            print(
                f"topic {TOPIC}: {report.produced:,} messages in {PARTITIONS} partitions, "
                f"keyed by {args.orgs} orgs with Zipf exponent {args.key_skew}"
            )
            views_file = _views_file(Path(tmp))
            rounds: dict[str, list[dict]] = {"a": [], "b": []}
            for _ in range(args.repeat):  # interleaved: the broker shares the cores
                rounds["a"].append(run_fleet(info.bootstrap, whole, views_file, args.events))
                rounds["b"].append(run_fleet(info.bootstrap, buckets, views_file, args.events))
        finally:
            broker.stop()
    a, b = ({k: statistics.median(r[k] for r in rounds[x]) for k in rounds[x][0]} for x in "ab")
    for name, r in (("(a) 4 tasks on 4 workers", a), ("(b) 16 buckets on 8 workers", b)):
        print(
            f"{name}: {r['rate']:,.0f} msg/s wall-clock ({r['wall_s']:.1f} s), "
            f"{r['cpu_s']:.1f} CPU-s in all, {r['cpu_us_per_kept']:.1f} CPU-µs per record kept, "
            f"each record fetched {r['read_amplification']:.1f}x, "
            f"hashing and filtering {r['hash_ns_per_seen']:.0f} ns per record a task saw, "
            f"the busiest worker kept {r['busiest_share']:.2f}x the mean"
        )
    print(f"measured here: (b)/(a) = {b['rate'] / a['rate']:.2f}x on {os.cpu_count()} cores")
    print(
        "projected with a core per worker (the topic over the busiest worker's CPU time): "
        f"(a) {a['projected_rate']:,.0f} msg/s, (b) {b['projected_rate']:,.0f} msg/s, "
        f"(b)/(a) = {b['projected_rate'] / a['projected_rate']:.2f}x"
    )
    ns = hash_cost(min(args.events, 200_000))
    per_record_ns = a["cpu_us_per_kept"] * 1000
    print(
        f"key hash: {ns:.0f} ns per record, {ns / per_record_ns:.1%} of a whole partition "
        f"task's {per_record_ns / 1000:.1f} µs per record"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
