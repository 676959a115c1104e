"""Ingest benchmark: what aggregation costs next to reading Kafka.

Measures, on the same topic of the same embedded broker, in one process run:
  (a) plain kafka-python consumption (same fetch settings the workers use),
  (b) one stream worker running the example views (decode, validate, window, aggregate,
      archive and flush every ``--flush-interval`` seconds),
and prints messages per second for both and the ratio b/a. Runs are interleaved and the
median of ``--repeat`` rounds is reported, because the broker shares the machine's cores.

    .venv/bin/python benchmarks/ingest.py [--events 300000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import TopicPartition

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kafka import EmbeddedBroker, consumer, ensure_topics, producer
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId
from pipelines.views import load_views

PARTITIONS = 4


def plain_consume(bootstrap: str, topic: str, total: int) -> float:
    client = consumer(bootstrap)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    client.assign(tps)
    client.seek_to_beginning(*tps)
    seen = 0
    started = time.monotonic()
    while seen < total:
        for records in client.poll(timeout_ms=200, max_records=5000).values():
            seen += len(records)
    elapsed = time.monotonic() - started
    client.close()
    return total / elapsed


def worker_consume(
    bootstrap: str, topic: str, total: int, views_file: Path, flush_s: float
) -> float:
    with tempfile.TemporaryDirectory() as state:
        settings = SluiceSettings(
            state_dir=Path(state),
            flush_interval_s=flush_s,
            checkpoint_interval_s=max(flush_s, 5.0),
            dead_letter_topic=f"{topic}.dlq",
        )
        worker = StreamWorker(
            "bench",
            [TaskId(topic, p) for p in range(PARTITIONS)],
            load_views(views_file),
            settings,
            bootstrap,
            LocalObjectStore(settings.resolved_storage_root),
        )
        worker.run(max_idle_s=1.0)
        consumed = sum(t.consumed for t in worker.tasks.values())
        assert consumed == total, f"worker consumed {consumed} of {total}"
        return total / (worker.last_progress_at - worker.started_at)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--flush-interval", type=float, default=5.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        broker = EmbeddedBroker(Path(tmp))
        info = broker.start()
        try:
            topic = "bench-events"
            ensure_topics(info.bootstrap, {topic: PARTITIONS, f"{topic}.dlq": 1})
            views_file = Path(tmp) / "views.yaml"
            views_file.write_text(
                (PROJECT_ROOT / "data" / "views.yaml")
                .read_text()
                .replace("topic: events", f"topic: {topic}")
            )
            out = producer(info.bootstrap, max_request_size=4 * 1024 * 1024)
            options = GeneratorOptions(max_events=args.events, peak_rate=50_000, speedup=60)
            report = replay(
                load_trace("nyc_taxi"),
                options,
                lambda m: out.send(topic, key=m.key, value=m.value),
                pace=False,
            )
            out.flush()
            out.close()
            print(
                f"topic {topic}: {report.produced:,} messages in {PARTITIONS} partitions "
                f"({report.malformed_total} malformed, {report.duplicates} duplicates, {report.late} late)"
            )
            plain, work = [], []
            for round_no in range(1, args.repeat + 1):
                plain.append(plain_consume(info.bootstrap, topic, args.events))
                work.append(
                    worker_consume(
                        info.bootstrap, topic, args.events, views_file, args.flush_interval
                    )
                )
                print(
                    f"round {round_no}: (a) plain {plain[-1]:,.0f} msg/s   (b) worker {work[-1]:,.0f} msg/s"
                )
        finally:
            broker.stop()
    a, b = statistics.median(plain), statistics.median(work)
    print()
    print(
        f"machine: {platform.platform()}, {platform.python_implementation()} {platform.python_version()}"
    )
    print(f"(a) plain kafka-python consumption : {a:>10,.0f} msg/s (median of {args.repeat})")
    print(f"(b) one worker, example views      : {b:>10,.0f} msg/s (median of {args.repeat})")
    print(f"ratio b/a                          : {b / a:>10.2f}   (target >= 0.85)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
