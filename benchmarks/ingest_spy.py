"""The (e) path of ``benchmarks/ingest.py`` for a sampling profiler, and the shares it found.

    py-spy record -r 250 --format raw -o e.txt -- .venv/bin/python benchmarks/ingest_spy.py run
    .venv/bin/python benchmarks/ingest_spy.py shares e.txt [--top 30]

``run`` feeds the stream tasks of the example views (``--no-sessions``: the windowed ones) the
generator's events from memory, in batches of ``SLUICE_POLL_MAX_RECORDS`` of one partition, as
librdkafka's reader hands them over (a partition's fetch at a time), then checkpoints them,
``--repeat`` times. py-spy samples it from outside, so unlike cProfile
(``benchmarks/ingest_profile.py``) it does not inflate the many small calls. ``shares`` reads
py-spy's raw (collapsed) stacks and prints each part's share of the samples taken inside those
runs (the archive's encoding thread counted beside them), and with ``--top`` the leaf lines
that took the most.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RUN_FRAME = "measured_run (ingest_spy.py"
ENCODING_FRAME = "write (pipelines/segments/parquet.py"
"""The archive's encoding thread (its stacks are not under the measured run's)."""
PARTS = (  # (label, frame): a sample counts for the first part whose frame is on its stack
    ("archive (Arrow table, Parquet, fsync)", "write (pipelines/archive/writer.py"),
    ("archive (Arrow table, Parquet, fsync)", "_encode (pipelines/archive/writer.py"),
    ("session view: rows", "segment_table (pipelines/stream/sessions.py"),
    ("session view: rows", "all_table (pipelines/stream/sessions.py"),
    ("session view: fold and close (settle)", "settle (pipelines/stream/sessions.py"),
    ("rest of the checkpoint (segments, state files)", "checkpoint (pipelines/stream/task.py"),
    ("decode: msgspec per message", "_decode_values (pipelines/generator/decoder.py"),
    ("decode: columns from the structs", "_columns (pipelines/events/decode.py"),
    ("decode: rest (watermarks, dead letters)", "decode_batch (pipelines/generator/decoder.py"),
    ("windowed views' update", "update (pipelines/stream/state.py"),
    ("rest of processing", "process (pipelines/stream/task.py"),
)


def measured_run(tasks: dict, batches: dict) -> tuple[float, float]:
    """Process every batch, then checkpoint: (process, checkpoint) wall seconds."""
    started = time.perf_counter()
    for i in range(max(len(b) for b in batches.values())):
        for p, task in tasks.items():
            if i < len(batches[p]):
                task.process(batches[p][i])
    processed = time.perf_counter()
    for task in tasks.values():
        task.checkpoint()
    return processed - started, time.perf_counter() - processed


def run(events: int, repeat: int, sessions: bool) -> None:
    import ingest_profile

    from pipelines.config import PROJECT_ROOT, SluiceSettings
    from pipelines.kinds import kind_of
    from pipelines.kinds.session import SESSIONS
    from pipelines.storage import LocalObjectStore
    from pipelines.stream.task import StreamTask
    from pipelines.stream.worker import tune_collector
    from pipelines.views import load_views

    ingest_profile.BATCH = SluiceSettings().poll_max_records
    left_out = set() if sessions else {SESSIONS}
    views = [
        v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if kind_of(v) not in left_out
    ]
    batches = ingest_profile.generated_batches(events)
    tune_collector()
    print(f"load average at start {os.getloadavg()}")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as state:
            settings = SluiceSettings(state_dir=Path(state))
            store = LocalObjectStore(settings.resolved_storage_root)
            sink = ingest_profile._NoDeadLetters()
            tasks = {p: StreamTask("events", p, views, store, sink, settings) for p in batches}
            for task in tasks.values():
                task.start_at(0)
            process_s, checkpoint_s = measured_run(tasks, batches)
        rate = events / (process_s + checkpoint_s)
        print(f"process {process_s:.2f} s, checkpoint {checkpoint_s:.2f} s: {rate:,.0f} msg/s")
    print(f"load average at end {os.getloadavg()}")


def shares(path: Path, top: int) -> None:
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = encoding = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if RUN_FRAME not in stack:
            encoding += int(count) if ENCODING_FRAME in stack else 0
            continue
        n = int(count)
        total += n
        parts[next((label for label, frame in PARTS if frame in stack), "other")] += n
        leaves[stack.rsplit(";", 1)[-1]] += n
    print(f"{total:,} samples in the measured runs")
    print(f"and {encoding:,} on the archive's encoding thread beside them ({encoding / total:.0%})")
    print("| part | share |\n|---|---:|")
    for label, n in parts.most_common():
        print(f"| {label} | {n / total:.0%} |")
    for leaf, n in leaves.most_common(top):
        print(f"{n / total:6.1%} {leaf}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("run")
    runner.add_argument("--events", type=int, default=300_000)
    runner.add_argument("--repeat", type=int, default=3)
    runner.add_argument("--no-sessions", action="store_true")
    reader = sub.add_parser("shares")
    reader.add_argument("stacks", type=Path)
    reader.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    if args.command == "run":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        run(args.events, args.repeat, not args.no_sessions)
    else:
        shares(args.stacks, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
