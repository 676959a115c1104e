"""Ingest benchmark: what aggregation costs next to reading Kafka, on each client.

Measures, on the same topic of the same embedded broker, in one process run:
  (a) raw confluent-kafka (librdkafka) consumption through the worker's reader,
  (b) raw kafka-python consumption through the worker's reader (same fetch settings),
  (c) one stream worker running the example views (decode, validate, window, aggregate,
      archive and flush every ``--flush-interval`` seconds) on each client,
  (d) the generator's produce rate (synthesis + send + delivery) on each client,
and prints messages per second and the ratios c/a and c/b. Runs are interleaved and the
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

from pipelines.config import PROJECT_ROOT, KafkaSettings, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kafka import EmbeddedBroker, ensure_topics
from pipelines.kafka.reader import open_reader
from pipelines.kafka.writer import open_writer
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId
from pipelines.views import load_views

PARTITIONS = 4


CLIENTS = ("confluent", "kafka-python")


def plain_consume(bootstrap: str, topic: str, total: int, client: str) -> float:
    """Read the whole topic through the worker's reader, doing nothing with the records."""
    reader = open_reader(bootstrap, KafkaSettings(client=client), f"bench-{time.monotonic_ns()}")
    reader.assign({TopicPartition(topic, p): 0 for p in range(PARTITIONS)})
    seen = 0
    started = time.monotonic()
    while seen < total:
        for records in reader.poll(0.2, 5000).values():
            seen += len(records)
    elapsed = time.monotonic() - started
    reader.close()
    return total / elapsed


def worker_consume(
    bootstrap: str, topic: str, total: int, views_file: Path, flush_s: float, client: str
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
            kafka=KafkaSettings(client=client),
        )
        worker.run(max_idle_s=1.0)
        consumed = sum(t.consumed for t in worker.tasks.values())
        assert consumed == total, f"worker consumed {consumed} of {total}"
        return total / (worker.last_progress_at - worker.started_at)


def generate(bootstrap: str, topic: str, events: int, client: str) -> tuple[float, object]:
    """Replay ``events`` generated messages to ``topic``: messages per second, the report."""
    writer = open_writer(bootstrap, KafkaSettings(client=client))
    options = GeneratorOptions(max_events=events, peak_rate=50_000, speedup=60)
    started = time.monotonic()
    report = replay(
        load_trace("nyc_taxi"), options, lambda m: writer.send(topic, m.key, m.value), pace=False
    )
    writer.flush()
    elapsed = time.monotonic() - started
    writer.close()
    return events / elapsed, report


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
            produce = {}
            for client in CLIENTS:  # each into a scratch topic; the measured topic comes after
                scratch = f"bench-produce-{client}"
                ensure_topics(info.bootstrap, {scratch: PARTITIONS})
                produce[client], _ = generate(info.bootstrap, scratch, args.events, client)
                print(f"generator on {client}: {produce[client]:,.0f} msg/s")
            _, report = generate(info.bootstrap, topic, args.events, "confluent")
            print(
                f"topic {topic}: {report.produced:,} messages in {PARTITIONS} partitions "
                f"({report.malformed_total} malformed, {report.duplicates} duplicates, {report.late} late)"
            )
            plain: dict[str, list[float]] = {c: [] for c in CLIENTS}
            work: dict[str, list[float]] = {c: [] for c in CLIENTS}
            for round_no in range(1, args.repeat + 1):
                for client in CLIENTS:
                    plain[client].append(plain_consume(info.bootstrap, topic, args.events, client))
                    work[client].append(
                        worker_consume(
                            info.bootstrap,
                            topic,
                            args.events,
                            views_file,
                            args.flush_interval,
                            client,
                        )
                    )
                    print(
                        f"round {round_no}, {client}: raw {plain[client][-1]:,.0f} msg/s, "
                        f"worker {work[client][-1]:,.0f} msg/s"
                    )
        finally:
            broker.stop()
    a, b = (statistics.median(plain[c]) for c in CLIENTS)
    ca, cb = (statistics.median(work[c]) for c in CLIENTS)
    print()
    print(
        f"machine: {platform.platform()}, {platform.python_implementation()} {platform.python_version()}"
    )
    n = args.repeat
    print(f"(a) raw confluent-kafka consumption  : {a:>10,.0f} msg/s (median of {n})")
    print(f"(b) raw kafka-python consumption     : {b:>10,.0f} msg/s (median of {n})")
    print(f"(c) one worker, views, confluent     : {ca:>10,.0f} msg/s (median of {n})")
    print(f"(c) one worker, views, kafka-python  : {cb:>10,.0f} msg/s (median of {n})")
    print(f"ratio c/a (confluent worker / raw)   : {ca / a:>10.2f}")
    print(f"ratio c/b (kafka-python worker / raw): {cb / b:>10.2f}")
    print(f"confluent worker / kafka-python one  : {ca / cb:>10.2f}")
    print(f"(d) generator, confluent             : {produce['confluent']:>10,.0f} msg/s")
    print(f"(d) generator, kafka-python          : {produce['kafka-python']:>10,.0f} msg/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
