"""Ingest benchmark: what aggregation costs next to reading Kafka, on each client.

Measures, on the same topic of the same embedded broker, in one process run:
  (a) raw confluent-kafka (librdkafka) consumption through the worker's reader,
  (b) raw kafka-python consumption through the worker's reader (same fetch settings),
  (c) one stream worker running the example views (decode, validate, window, aggregate,
      archive and flush every ``--flush-interval`` seconds) on each client,
  (d) the generator's produce rate (synthesis + send + delivery) on each client,
  (e) the same stream tasks fed the topic's records from memory (no Kafka in the loop): the
      ceiling a worker's own processing sets,
  (f) the session view of the example views against windowed views with the same
      aggregations (per org every 10 minutes, and per session id every hour): each alone in
      tasks fed from memory, its cost per event being the time beyond the same tasks with no
      view (decoding and archiving), and the memory per open session of its state,
  (g) the decoder alone on the records in memory, microseconds per valid message: the
      hand-written :func:`decode_batch` against the decoder built from the generator's
      declaration, side by side; the declared decoder of a 20-field nested topic with
      nulls and ISO-8601 times; and the same events as Avro, decoded through the schema
      registry (the tests' stand-in) and with a schema file, against them as JSON
      (``--decoder-only`` measures just this),
  (h) each aggregation type alone in one view (per org every 10 minutes): microseconds per
      event of the view's window state on batches decoded beforehand, a flush's segment tables
      included (where a sliding view builds its windows); and sliding windows (1 h every
      5 min) against tumbling 1 h ones with the same aggregations (``--aggregations-only``),
  (i) what the tasks of the windowed views hold between flushes, in bytes per event
      (``--memory-only``),
  (j) one worker, and its tasks fed from memory, running the flights example's views
      (data/flights.yaml, a declared topic of nested JSON with nulls and ISO-8601 times) on
      its messages (data/flights.jsonl.gz, the week replayed over and over a week later each
      time), beside the same worker running the shipped views on the generator's events
      (``--example flights`` measures just this),
and prints messages per second and the ratios c/a, c/b and c/e. Runs are interleaved and the
median of ``--repeat`` rounds is reported, because the broker shares the machine's cores.

    .venv/bin/python benchmarks/ingest.py [--events 300000] [--repeat 3] [--decoder-only]
    .venv/bin/python benchmarks/ingest.py --throughput-only   # (a), (c), (e) only: ~2 minutes
    .venv/bin/python benchmarks/ingest.py --example flights   # (j) only: ~2 minutes

``--throughput-only`` measures, on librdkafka alone, (a), (c) and (e) with the example
windowed views and again with the session view added (the figures of issue 33 and of
``SLUICE_AUTOSCALE_FLEET__WORKER_RATE``), and prints the machine and its load average at the
start and the end (the machine may be shared: compare ratios of the same run).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from itertools import zip_longest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import TopicPartition

from pipelines.config import PROJECT_ROOT, KafkaSettings, SluiceSettings
from pipelines.events.decode import RecordBatch
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.generator.file_replay import BadRow, read_rows, replay_file
from pipelines.kafka import EmbeddedBroker, ensure_topics
from pipelines.kafka.reader import open_reader
from pipelines.kafka.writer import open_writer
from pipelines.kinds import by_kind
from pipelines.kinds.session import SESSIONS
from pipelines.kinds.windowed import WINDOWED
from pipelines.storage import LocalObjectStore
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.stream.sessions import SessionState
from pipelines.stream.state import WindowState
from pipelines.stream.task import StreamTask
from pipelines.views import View, load_views, parse_views

PARTITIONS = 4
POLL_MAX_RECORDS = SluiceSettings().poll_max_records
"""Records per poll, as the worker polls them (``SLUICE_POLL_MAX_RECORDS``): (a) and (e) read
the topic in the batches the worker's own tasks get."""


CLIENTS = ("confluent", "kafka-python")

FLIGHTS_VIEWS = PROJECT_ROOT / "data" / "flights.yaml"
FLIGHTS_FILE = PROJECT_ROOT / "data" / "flights.jsonl.gz"
FLIGHTS_TOPIC = "flights"
"""The topic data/flights.yaml declares and its views read."""
FLIGHTS_MAX_FUTURE_S = 24 * 3600.0
"""``SLUICE_MAX_FUTURE_S`` for (j), as ``sluice up --replay`` sets it: no flight leaves between
midnight and 5 am, and a partition's night is longer still, past the default 6 hours (every
later flight of that partition would be dead-lettered as too far ahead of its watermark)."""


def plain_consume(bootstrap: str, topic: str, total: int, client: str) -> float:
    """Read the whole topic through the worker's reader, doing nothing with the records."""
    reader = open_reader(bootstrap, KafkaSettings(client=client), f"bench-{time.monotonic_ns()}")
    reader.assign({TopicPartition(topic, p): 0 for p in range(PARTITIONS)})
    seen = 0
    started = time.monotonic()
    while seen < total:
        for records in reader.poll(0.2, POLL_MAX_RECORDS).values():
            seen += len(records)
    elapsed = time.monotonic() - started
    reader.close()
    return total / elapsed


def worker_consume(
    bootstrap: str,
    topic: str,
    total: int,
    views_file: Path,
    flush_s: float,
    client: str,
    max_future_s: float | None = None,
) -> float:
    with tempfile.TemporaryDirectory() as state:
        settings = SluiceSettings(
            state_dir=Path(state),
            flush_interval_s=flush_s,
            checkpoint_interval_s=max(flush_s, 5.0),
            dead_letter_topic=f"{topic}.dlq",
            **({} if max_future_s is None else {"max_future_s": max_future_s}),
        )
        worker = StreamWorker(
            "bench",
            [TaskId(topic, p) for p in range(PARTITIONS)],
            load_views(views_file),
            settings,
            open_worker_clients(bootstrap, KafkaSettings(client=client), topic),
            LocalObjectStore(settings.resolved_storage_root),
        )
        # Until every record is processed and the final checkpoint (archive, segments, state)
        # is written: a flush interval's durable work belongs to the rate it sustains.
        runner = threading.Thread(target=worker.run, name="bench-worker")
        runner.start()
        while sum(t.consumed for t in list(worker.tasks.values())) < total:
            if not runner.is_alive():
                raise RuntimeError("the worker stopped before consuming the topic")
            time.sleep(0.005)
        worker.stop_event.set()
        runner.join()
        elapsed = time.monotonic() - worker.started_at
        consumed = sum(t.consumed for t in worker.tasks.values())
        assert consumed == total, f"worker consumed {consumed} of {total}"
        return total / elapsed


def read_all(bootstrap: str, topic: str, total: int) -> dict[int, list[RecordBatch]]:
    """The topic's records as the reader hands them over, kept in memory for (e)."""
    reader = open_reader(bootstrap, KafkaSettings(), f"bench-mem-{time.monotonic_ns()}")
    reader.assign({TopicPartition(topic, p): 0 for p in range(PARTITIONS)})
    batches: dict[int, list[RecordBatch]] = {p: [] for p in range(PARTITIONS)}
    seen = 0
    while seen < total:
        for tp, batch in reader.poll(0.2, POLL_MAX_RECORDS).items():
            batches[tp.partition].append(batch)
            seen += len(batch)
    reader.close()
    return batches


def _started_tasks(
    topic: str, batches: dict[int, list[RecordBatch]], views: list[View], settings: SluiceSettings
) -> dict[int, StreamTask]:
    """A stream task per partition of ``batches``, started at offset 0 on local storage."""
    store = LocalObjectStore(settings.resolved_storage_root)
    tasks = {p: StreamTask(topic, p, views, store, _NoDeadLetters(), settings) for p in batches}
    for task in tasks.values():
        task.start_at(0)
    return tasks


def _rounds(tasks: dict[int, StreamTask], batches: dict[int, list[RecordBatch]]) -> Iterator[None]:
    """Hand every task its partition's next batch, round after round (as polls interleave
    partitions); yields after each round."""
    for round_batches in zip_longest(*batches.values()):
        for partition, batch in zip(batches, round_batches, strict=True):
            if batch is not None:
                tasks[partition].process(batch)
        yield


def tasks_from_memory(
    topic: str,
    batches: dict[int, list[RecordBatch]],
    views_file: Path,
    flush_s: float,
    max_future_s: float | None = None,
) -> float:
    """Stream tasks on the records in memory, flushing on the worker's schedule."""
    total = sum(len(b) for bs in batches.values() for b in bs)
    with tempfile.TemporaryDirectory() as state:
        settings = SluiceSettings(
            state_dir=Path(state),
            flush_interval_s=flush_s,
            **({} if max_future_s is None else {"max_future_s": max_future_s}),
        )
        tasks = _started_tasks(topic, batches, load_views(views_file), settings)
        started = time.monotonic()
        next_flush = started + flush_s
        for _ in _rounds(tasks, batches):
            if time.monotonic() >= next_flush:
                for task in tasks.values():
                    task.flush()
                next_flush = time.monotonic() + flush_s
        for task in tasks.values():  # the final checkpoint, as the worker's (c) includes
            task.checkpoint()
        return total / (time.monotonic() - started)


def _view_seconds(
    topic: str,
    batches: dict[int, list[RecordBatch]],
    views: list[View],
    flush: bool = False,
    max_future_s: float | None = None,
) -> float:
    """Seconds the tasks take to process the records in memory with ``views`` (no flushes but,
    with ``flush``, the last one, which writes every segment)."""
    with tempfile.TemporaryDirectory() as state:
        settings = SluiceSettings(
            state_dir=Path(state),
            **({} if max_future_s is None else {"max_future_s": max_future_s}),
        )
        store = LocalObjectStore(settings.resolved_storage_root)
        tasks = {p: StreamTask(topic, p, views, store, _NoDeadLetters(), settings) for p in batches}
        started = time.perf_counter()
        for partition, task in tasks.items():
            task.start_at(0)
            for batch in batches[partition]:
                task.process(batch)
            for view_state in task.states.values():
                view_state.settle(task.watermark)
            if flush:
                task.flush()
        return time.perf_counter() - started


AGGREGATIONS = {  # (h): each type as a view would use it: (column, params, own where:)
    "count": (None, {}, None),
    "sum": ("bytes_tx", {}, None),
    "min": ("bytes_tx", {}, None),
    "max": ("bytes_tx", {}, None),
    "mean": ("bytes_tx", {}, None),
    "count_distinct": ("client", {}, None),
    "approx_count_distinct": ("session_id", {"lg_k": 12}, None),
    "quantiles": ("bytes_tx", {"quantiles": [0.5, 0.95, 0.99]}, None),
    "top_k": ("client", {"k": 10}, None),
    "first": ("event_type", {}, None),
    "last": ("event_type", {}, None),
    "variance": ("bytes_tx", {}, None),
    "stddev": ("bytes_tx", {}, None),
    "ratio": ("bytes_tx", {"denominator": "event_time"}, None),
    "count_if": (None, {}, "event_type = 'error'"),
    "sum_if": ("bytes_tx", {}, "event_type in ('download', 'upload')"),
    "any_value": ("client", {}, None),
    "max_by": ("client", {"by": "bytes_tx"}, None),
    "min_by": ("client", {"by": "bytes_tx"}, None),
    "mode": ("event_type", {}, None),
    "frequent_items": ("client", {"k": 10}, None),
    "hll_bounds": ("session_id", {"lg_k": 12}, None),
    "theta_distinct": ("session_id", {"lg_k": 12}, None),
    "theta_bounds": ("session_id", {"lg_k": 12}, None),
    "cdf": ("bytes_tx", {"split_points": [1000, 10000, 100000]}, None),
    "histogram": ("bytes_tx", {"split_points": [1000, 10000, 100000]}, None),
}


def _one_view(topic: str, specs: list[dict], interval: str, slide: str | None = None) -> View:
    definition = {
        "name": "h",
        "topic": topic,
        "grouping_cols": ["org"],
        "interval": interval,
        "allowed_lateness": "2m",
        "aggregation_info": specs,
    }
    if slide is not None:
        definition["slide"] = slide
    (view,) = parse_views([definition])
    return view


def _decoded(batches: dict[int, list[RecordBatch]]) -> dict[int, list]:
    """Every partition's batches decoded once, in order (what a task hands its views)."""
    from pipelines.events.decode import NO_WATERMARK
    from pipelines.generator.decoder import decode_batch

    out: dict[int, list] = {}
    for partition in sorted(batches):
        watermark = NO_WATERMARK
        out[partition] = []
        for batch in batches[partition]:
            decoded = decode_batch(
                batch, watermark, max_message_bytes=64 * 1024, max_future_ms=6 * 3_600_000
            )
            watermark = decoded.watermark
            out[partition].append(decoded)
    return out


def _state_seconds(decoded: dict[int, list], view: View) -> float:
    """Seconds one view's window state takes over the decoded batches, then the segment
    tables of a flush (where a sliding view builds its windows from panes)."""
    started = time.perf_counter()
    for batches in decoded.values():
        state = WindowState(view)
        for batch in batches:
            batch.codes.clear()  # each view run factorizes its grouping column itself
            state.update(batch)
        for segment in sorted(state.dirty):
            state.segment_table(segment)
    return time.perf_counter() - started


def aggregation_costs(
    topic: str, batches: dict[int, list[RecordBatch]], repeat: int
) -> dict[str, float]:
    """(h): microseconds per event of each aggregation alone in one view's window state
    (decoding excluded: the batches are decoded once beforehand), and of sliding against
    tumbling windows; medians of ``repeat`` interleaved runs."""
    candidates: dict[str, View] = {}
    for name, (col, params, where) in AGGREGATIONS.items():
        spec = {"aggregation": name, "aggregated_col_name": "m", "params": params}
        spec |= {"col_name": col} if col else {}
        spec |= {"where": where} if where else {}
        candidates[name] = _one_view(topic, [spec], "10m")
    windowed = [
        {"aggregation": "count", "aggregated_col_name": "n"},
        {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "b"},
        {"aggregation": "quantiles", "col_name": "bytes_tx", "aggregated_col_name": "q"},
    ]
    candidates["tumbling 1h (count, sum, quantiles)"] = _one_view(topic, windowed, "1h")
    candidates["sliding 1h every 5m (same)"] = _one_view(topic, windowed, "1h", "5m")
    decoded = _decoded(batches)
    total = sum(len(b) for bs in decoded.values() for b in bs)
    seconds: dict[str, list[float]] = {label: [] for label in candidates}
    for _ in range(repeat):
        for label, view in candidates.items():
            seconds[label].append(_state_seconds(decoded, view))
    return {label: statistics.median(values) / total * 1e6 for label, values in seconds.items()}


def print_aggregations(costs: dict[str, float], repeat: int) -> None:
    quantiles = max(costs["quantiles"], 1e-9)
    for label, cost in costs.items():
        note = f"{cost / quantiles:>5.2f}x quantiles" if label in AGGREGATIONS else ""
        print(f"(h) {label:<36}: {cost:>7.2f} us/event, decoding excluded  {note}")
    tumbling = max(costs["tumbling 1h (count, sum, quantiles)"], 1e-9)
    sliding = costs["sliding 1h every 5m (same)"]
    print(
        f"(h) sliding / tumbling per event     : {sliding / tumbling:>7.2f}x (median of {repeat})"
    )


def session_comparison(
    topic: str, batches: dict[int, list[RecordBatch]], views_file: Path, repeat: int
) -> dict[str, float]:
    """(f): marginal microseconds per event of the session view and of windowed views with the
    same aggregations, medians of ``repeat`` interleaved runs."""
    session = by_kind(load_views(views_file))[SESSIONS][0]
    specs = [
        {"aggregation": a.aggregation, "aggregated_col_name": f"m_{a.aggregated_col_name}"}
        | ({"col_name": a.col_name} if a.col_name else {})
        for a in session.aggregations
    ]
    windowed = {
        "windowed per org, 10m": ("org", "10m"),
        "windowed per session id, 1h": ("session_id", "1h"),
    }
    candidates = {"session view": session}
    for label, (col, interval) in windowed.items():
        (view,) = parse_views(
            [
                {
                    "name": "w",
                    "topic": topic,
                    "grouping_cols": [col],
                    "interval": interval,
                    "allowed_lateness": "2m",
                    "aggregation_info": specs,
                }
            ]
        )
        candidates[label] = view
    total = sum(len(b) for bs in batches.values() for b in bs)
    seconds: dict[str, list[float]] = {label: [] for label in ["no view", *candidates]}
    for _ in range(repeat):
        seconds["no view"].append(_view_seconds(topic, batches, []))
        for label, view in candidates.items():
            seconds[label].append(_view_seconds(topic, batches, [view]))
    base = statistics.median(seconds["no view"])
    return {
        label: max(0.0, statistics.median(values) - base) / total * 1e6
        for label, values in seconds.items()
        if label != "no view"
    } | {"no view": base / total * 1e6}


def _generator_declaration():
    import yaml

    from pipelines.events.declaration import TopicDeclaration

    document = yaml.safe_load((PROJECT_ROOT / "data" / "topics.yaml").read_text())
    (star,) = [t for t in document["topics"] if t["topic"] == "*"]
    return TopicDeclaration(**star)


def _decoding_seconds(decode, batches: dict[int, list[RecordBatch]]) -> tuple[float, int]:
    """Seconds to decode every partition's batches in order (the watermark carried as a task
    does), and the valid messages."""
    from pipelines.events.decode import NO_WATERMARK

    valid = 0
    started = time.perf_counter()
    for partition in sorted(batches):
        watermark = NO_WATERMARK
        for batch in batches[partition]:
            out = decode(batch, watermark, max_message_bytes=64 * 1024, max_future_ms=6 * 3_600_000)
            watermark = out.watermark
            valid += len(out)
    return time.perf_counter() - started, valid


def decoder_cost(batches: dict[int, list[RecordBatch]], repeat: int) -> dict[str, list[float]]:
    """(g): microseconds per valid message of the hand-written :func:`decode_batch` and of the
    decoder built from the generator's declaration (data/topics.yaml) on the same batches,
    interleaved, one figure per round each."""
    from pipelines.events.declared import decoder_for
    from pipelines.generator.decoder import decode_batch

    declared = decoder_for(_generator_declaration())
    figures: dict[str, list[float]] = {"hand-written": [], "declared": []}
    for _ in range(repeat):
        for label, decode in (("hand-written", decode_batch), ("declared", declared)):
            seconds, valid = _decoding_seconds(decode, batches)
            figures[label].append(seconds / max(1, valid) * 1e6)
    return figures


NESTED = {  # (g): a 20-field nested topic with nulls and string timestamps
    "topic": "payments",
    "event_time": {"path": "created", "format": "iso8601"},
    "fields": [
        {"name": "merchant", "type": "string", "path": "merchant.name"},
        {"name": "merchant_id", "type": "long", "path": "merchant.id"},
        {"name": "category", "type": "string", "path": "merchant.category"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "country", "type": "string", "path": "card.country"},
        {"name": "brand", "type": "string", "path": "card.brand"},
        {"name": "last4", "type": "string", "path": "card.last4"},
        {"name": "refund_reason", "type": "string", "nullable": True},
        {"name": "settled_at", "type": "timestamp", "format": "iso8601", "nullable": True},
        {"name": "customer", "type": "string", "path": "customer.id"},
        {"name": "segment", "type": "string", "path": "customer.segment", "nullable": True},
        {"name": "os", "type": "string", "path": "device.os"},
        {"name": "app_version", "type": "string", "path": "device.app_version"},
        {"name": "items", "type": "long"},
        {"name": "risk", "type": "double", "path": "risk.score"},
        {"name": "flagged", "type": "boolean", "path": "risk.flagged"},
        {"name": "channel", "type": "string"},
        {"name": "tip", "type": "double", "nullable": True},
        {"name": "region", "type": "string"},
    ],
}


def _nested_batches(events: int) -> dict[int, list[RecordBatch]]:
    """``events`` messages of :data:`NESTED` (a tenth of them refunds, a third with no
    settlement, tip or segment), in batches of the worker's poll size, one partition."""
    import orjson

    return _batches(list(map(orjson.dumps, _nested_events(events))))


def _batches(values: list[bytes]) -> dict[int, list[RecordBatch]]:
    batches = []
    for lo in range(0, len(values), POLL_MAX_RECORDS):
        part = values[lo : lo + POLL_MAX_RECORDS]
        offsets = list(range(lo, lo + len(part)))
        batches.append(RecordBatch(offsets, [0] * len(part), part, [None] * len(part)))
    return {0: batches}


def _nested_events(events: int) -> list[dict]:
    import random
    from datetime import UTC, datetime, timedelta, timezone

    plus2 = timezone(timedelta(hours=2))  # a producer's clock at UTC+2
    rng = random.Random(46)
    start = datetime(2014, 7, 1, tzinfo=UTC)
    values = []
    for i in range(events):
        created = start + timedelta(milliseconds=i * 37)
        values.append(
            {
                "merchant": {
                    "name": f"m-{rng.randrange(500)}",
                    "id": rng.randrange(10**6),
                    "category": rng.choice(["food", "travel", "games"]),
                },
                "amount": round(rng.uniform(1, 500), 2),
                "currency": rng.choice(["EUR", "USD", "GBP"]),
                "card": {
                    "country": rng.choice(["FR", "US", "DE", "GB"]),
                    "brand": rng.choice(["visa", "mc"]),
                    "last4": f"{rng.randrange(10**4):04d}",
                },
                "refund_reason": "fraud" if rng.random() < 0.1 else None,
                "created": created.astimezone(plus2).isoformat(timespec="milliseconds"),
                "settled_at": None
                if rng.random() < 0.3
                else (created + timedelta(hours=2)).isoformat().replace("+00:00", "Z"),
                "customer": {
                    "id": f"c-{rng.randrange(10**5)}",
                    "segment": None if rng.random() < 0.3 else "retail",
                },
                "device": {"os": rng.choice(["ios", "android"]), "app_version": "5.1.0"},
                "items": rng.randrange(1, 9),
                "risk": {"score": rng.random(), "flagged": rng.random() < 0.05},
                "channel": "app",
                "tip": None if rng.random() < 0.3 else 1.5,
                "region": "eu",
            }
        )
    return values


def nested_decoder_cost(events: int, repeat: int) -> dict[str, list[float]]:
    """(g): microseconds per valid message of the decoder built from :data:`NESTED`, beside
    ``orjson.loads`` alone on the same messages (parsing, no types or columns)."""
    import orjson

    from pipelines.events.declaration import TopicDeclaration
    from pipelines.events.declared import decoder_for

    decode = decoder_for(TopicDeclaration(**NESTED))
    batches = _nested_batches(events)
    figures: dict[str, list[float]] = {"declared": [], "orjson.loads": []}
    for _ in range(repeat):
        seconds, valid = _decoding_seconds(decode, batches)
        assert valid == events, f"{events - valid} of the nested messages were refused"
        figures["declared"].append(seconds / valid * 1e6)
        started = time.perf_counter()
        for batch in batches[0]:
            list(map(orjson.loads, batch.values))
        figures["orjson.loads"].append((time.perf_counter() - started) / events * 1e6)
    return figures


def _nested_avro_schema() -> dict:
    """:data:`NESTED`'s messages as an Avro record (times as ``timestamp-millis``)."""

    def record(name: str, fields: list[tuple[str, object]]) -> dict:
        return {
            "type": "record",
            "name": name,
            "fields": [{"name": n, "type": t} for n, t in fields],
        }

    time = {"type": "long", "logicalType": "timestamp-millis"}
    return record(
        "Payment",
        [
            ("merchant", record("Merchant", [("name", "string"), ("id", "long"), ("category", "string")])),
            ("amount", "double"),
            ("currency", "string"),
            ("card", record("Card", [("country", "string"), ("brand", "string"), ("last4", "string")])),
            ("refund_reason", ["null", "string"]),
            ("created", time),
            ("settled_at", ["null", time]),
            ("customer", record("Customer", [("id", "string"), ("segment", ["null", "string"])])),
            ("device", record("Device", [("os", "string"), ("app_version", "string")])),
            ("items", "long"),
            ("risk", record("Risk", [("score", "double"), ("flagged", "boolean")])),
            ("channel", "string"),
            ("tip", ["null", "double"]),
            ("region", "string"),
        ],
    )  # fmt: skip


def avro_decoder_cost(events: int, repeat: int) -> dict[str, list[float]]:
    """(g): microseconds per valid message of :data:`NESTED`'s events written as Avro (by
    confluent-kafka's AvroSerializer, through the tests' schema registry stand-in) and decoded
    through the registry, and with a schema file, beside the same events as JSON, decoded by
    the declared JSON decoder, and fastavro's reader alone on the Avro bodies (parsing, no
    types or columns); interleaved, one figure per round each."""
    import io
    import json
    import tempfile
    from datetime import datetime

    import fastavro
    import orjson
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pipelines.events.avro import avro_decoder_for
    from pipelines.events.declaration import TopicDeclaration
    from pipelines.events.declared import decoder_for
    from tests.fixtures.schema_registry import schema_registry

    schema = _nested_avro_schema()
    plain = _nested_events(events)
    as_avro = [
        {
            **e,
            "created": datetime.fromisoformat(e["created"]),
            "settled_at": e["settled_at"] and datetime.fromisoformat(e["settled_at"]),
        }
        for e in plain
    ]
    fields = [{k: v for k, v in f.items() if k != "format"} for f in NESTED["fields"]]
    avro = TopicDeclaration(
        topic="payments", encoding="avro", event_time={"path": "created"}, fields=fields
    )
    json_batches = _batches(list(map(orjson.dumps, plain)))
    figures: dict[str, list[float]] = {
        "json": [],
        "avro registry": [],
        "avro schema file": [],
        "fastavro alone": [],
    }
    with schema_registry() as registry, tempfile.TemporaryDirectory() as tmp:
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
        context = SerializationContext("payments", MessageField.VALUE)
        avro_batches = _batches([serialize(e, context) for e in as_avro])
        schema_file = Path(tmp) / "payment.avsc"
        schema_file.write_text(json.dumps(schema))
        decoders = {
            "json": (decoder_for(TopicDeclaration(**NESTED)), json_batches),
            "avro registry": (avro_decoder_for(avro, {"url": registry.url}), avro_batches),
            "avro schema file": (
                avro_decoder_for(avro.model_copy(update={"schema_file": str(schema_file)}), None),
                avro_batches,
            ),
        }
        parsed = fastavro.parse_schema(schema)
        for _ in range(repeat):
            for label, (decode, batches) in decoders.items():
                seconds, valid = _decoding_seconds(decode, batches)
                assert valid == events, f"{label}: {events - valid} of the messages were refused"
                figures[label].append(seconds / valid * 1e6)
            started = time.perf_counter()
            for batch in avro_batches[0]:
                for value in batch.values:
                    fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
            figures["fastavro alone"].append((time.perf_counter() - started) / events * 1e6)
    return figures


def print_decoder_costs(generator: dict[str, list[float]], nested: dict[str, list[float]]) -> None:
    def line(values: list[float]) -> str:
        rounds = ", ".join(f"{v:.3f}" for v in values)
        return f"{statistics.median(values):.3f} us (rounds {rounds})"

    hand, declared = (statistics.median(generator[k]) for k in ("hand-written", "declared"))
    print(
        f"(g) the decoder alone, generator's topic, hand-written : {line(generator['hand-written'])}"
    )
    print(f"(g) the same, decoder built from its declaration       : {line(generator['declared'])}")
    print(f"(g) declared / hand-written                            : {declared / hand:.2f}x")
    print(f"(g) 20-field nested topic, nulls, ISO times, declared  : {line(nested['declared'])}")
    print(
        f"(g) the same messages, orjson.loads alone              : {line(nested['orjson.loads'])}"
    )


def print_avro_costs(avro: dict[str, list[float]]) -> None:
    def line(values: list[float]) -> str:
        rounds = ", ".join(f"{v:.3f}" for v in values)
        return f"{statistics.median(values):.3f} us (rounds {rounds})"

    base = statistics.median(avro["json"])
    print(f"(g) 20-field nested topic as JSON, declared decoder   : {line(avro['json'])}")
    for label in ("avro registry", "avro schema file"):
        ratio = statistics.median(avro[label]) / base
        print(f"(g) the same as Avro, {label:<17}           : {line(avro[label])} ({ratio:.1f}x)")
    print(
        f"(g) the Avro bodies, fastavro's reader alone           : {line(avro['fastavro alone'])}"
    )


def session_memory(topic: str, batches: dict[int, list[RecordBatch]], views_file: Path) -> dict:
    """(f): bytes per open session of the example session view's state (tracemalloc), after
    every record is in and settled, with the closed sessions' rows and the pending events
    counted apart."""
    from pipelines.events.decode import NO_WATERMARK
    from pipelines.generator.decoder import decode_batch

    session = replace(by_kind(load_views(views_file))[SESSIONS][0], topic=topic)
    decoded = []
    for partition in sorted(batches):
        watermark = NO_WATERMARK
        for batch in batches[partition]:
            out = decode_batch(
                batch, watermark, max_message_bytes=64 * 1024, max_future_ms=6 * 3_600_000
            )
            watermark = out.watermark
            decoded.append((partition, out))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    states = {p: SessionState(session) for p in batches}
    for partition, batch in decoded:
        states[partition].update(batch)
    for partition, state in states.items():
        last = [b for p, b in decoded if p == partition][-1]
        state.settle(last.watermark)
    gc.collect()
    full = tracemalloc.get_traced_memory()[0] - before
    open_sessions = sum(s.open_sessions for s in states.values())
    closed = sum(
        1
        for s in states.values()
        for bucket in s.buckets.values()
        for v in bucket.values()
        if isinstance(v, tuple)
    )
    pending = sum(s.pending_rows for s in states.values())
    for state in states.values():  # drop the pending events and the closed sessions' rows
        state.pending = []
        for bucket in state.buckets.values():
            for key in [k for k, v in bucket.items() if isinstance(v, tuple)]:
                del bucket[key]
    gc.collect()
    open_only = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {
        "open": open_sessions,
        "closed_rows": closed,
        "pending": pending,
        "bytes_total": full,
        "bytes_per_open": open_only / max(1, open_sessions),
    }


def held_memory(topic: str, batches: dict[int, list[RecordBatch]], views_file: Path) -> dict:
    """(i): what the tasks of the example windowed views hold between flushes, in bytes per
    event: fed every record from memory with no flush (the archive's encoding thread caught
    up), then after one flush. Python objects and numpy arrays as tracemalloc traces them,
    Arrow's buffers (the archive's encoded row groups) by Arrow's memory pool."""
    import pyarrow as pa

    from pipelines.archive.encoder import encode_later

    views = by_kind(load_views(views_file))[WINDOWED]
    total = sum(len(b) for bs in batches.values() for b in bs)
    with tempfile.TemporaryDirectory() as state:
        gc.collect()
        tracemalloc.start()
        traced, arrow = tracemalloc.get_traced_memory()[0], pa.total_allocated_bytes()
        tasks = _started_tasks(topic, batches, views, SluiceSettings(state_dir=Path(state)))
        for _ in _rounds(tasks, batches):
            pass
        encode_later(lambda: None).result()  # one thread, in order: all before it is encoded

        def held() -> float:
            gc.collect()
            now = tracemalloc.get_traced_memory()[0] - traced
            return (now + pa.total_allocated_bytes() - arrow) / total

        before_flush = held()
        for task in tasks.values():
            task.flush()
        after_flush = held()
        tracemalloc.stop()
    return {"before_flush": before_flush, "after_flush": after_flush, "events": total}


def print_held_memory(held: dict) -> None:
    n = held["events"]
    print(
        f"(i) held between flushes, windowed views: {held['before_flush']:,.0f} B/event "
        f"({held['before_flush'] * n / 1e6:,.1f} MB) after {n:,} events with no flush, "
        f"{held['after_flush']:,.0f} B/event after it"
    )


class _NoDeadLetters:
    def send(self, *_args: object) -> None:
        pass

    def flush(self) -> None:
        pass


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


def flight_rows(events: int) -> Iterator[tuple[int, dict]]:
    """``events`` flights: the example's file over and over, each pass shifted by whole weeks
    past the previous one, so event times keep rising (the file is in time order) and every
    message stays valid under data/flights.yaml's declaration."""
    from datetime import datetime, timedelta

    rows = []
    for line, row in read_rows(FLIGHTS_FILE, "jsonl"):
        if isinstance(row, BadRow):
            raise ValueError(f"{FLIGHTS_FILE}:{line}: {row.reason}")
        rows.append((row, datetime.fromisoformat(row["departure"]["scheduled"])))
    first, last = rows[0][1], rows[-1][1]
    week = timedelta(weeks=1)
    step = week * (1 + (last - first) // week)
    for n in range(events):
        row, scheduled = rows[n % len(rows)]
        shifted = (scheduled + step * (n // len(rows))).isoformat()
        yield n + 1, {**row, "departure": {**row["departure"], "scheduled": shifted}}


def produce_flights(bootstrap: str, events: int) -> None:
    """Replay ``events`` flights to :data:`FLIGHTS_TOPIC` as ``sluice replay`` does, keyed by
    the plane's tail number (a null one: the partitioner's choice)."""
    writer = open_writer(bootstrap, KafkaSettings())
    report = replay_file(
        flight_rows(events),
        lambda key, value: writer.send(FLIGHTS_TOPIC, key, value),
        key_field="flight.tailnum",
    )
    writer.flush()
    writer.close()
    if report.produced != events or report.bad:
        raise RuntimeError(f"flights: {report.produced:,} of {events:,} sent, {report.bad[:3]}")


def flights_decoded(batches: dict[int, list[RecordBatch]]) -> dict[int, list]:
    """The flights in memory through the declared decoder of data/flights.yaml, per partition."""
    from pipelines.events.declared import decoder_for
    from pipelines.events.decode import NO_WATERMARK

    (declaration,) = {
        v.declaration.model_dump_json(): v.declaration for v in load_views(FLIGHTS_VIEWS)
    }.values()
    decoded: dict[int, list] = {}
    for partition in sorted(batches):
        watermark = NO_WATERMARK
        decoded[partition] = []
        for batch in batches[partition]:
            out = decoder_for(declaration)(
                batch,
                watermark,
                max_message_bytes=SluiceSettings().max_message_bytes,
                max_future_ms=int(FLIGHTS_MAX_FUTURE_S * 1000),
            )
            watermark = out.watermark
            decoded[partition].append(out)
    return decoded


def partition_hours(decoded: dict[int, list]) -> int:
    """Event-time hours with events, summed over partitions: an archive file each, and a
    reason why a sparse topic costs more per message than a dense one."""
    from pipelines.events.declaration import EVENT_TIME

    return sum(
        len({int(t) // 3_600_000 for batch in batches for t in batch.columns[EVENT_TIME]})
        for batches in decoded.values()
    )


def mean_bytes(batches: dict[int, list[RecordBatch]]) -> float:
    values = [len(v) for bs in batches.values() for b in bs for v in b.values]
    return sum(values) / max(1, len(values))


def example_round(
    bootstrap: str, events: int, flush_s: float, in_memory: dict[int, list[RecordBatch]]
) -> dict[str, float]:
    """(j), one round: one worker on librdkafka and the tasks from memory, the flights views
    on the flights topic."""
    return {
        "c flights": worker_consume(
            bootstrap,
            FLIGHTS_TOPIC,
            events,
            FLIGHTS_VIEWS,
            flush_s,
            "confluent",
            FLIGHTS_MAX_FUTURE_S,
        ),
        "e flights": tasks_from_memory(
            FLIGHTS_TOPIC, in_memory, FLIGHTS_VIEWS, flush_s, FLIGHTS_MAX_FUTURE_S
        ),
        "p flights": events
        / _view_seconds(
            FLIGHTS_TOPIC,
            in_memory,
            load_views(FLIGHTS_VIEWS),
            max_future_s=FLIGHTS_MAX_FUTURE_S,
        ),
    }


def prepare_flights(bootstrap: str, events: int) -> dict[int, list[RecordBatch]]:
    """The flights topic, filled and checked: every message valid under its declaration."""
    ensure_topics(bootstrap, {FLIGHTS_TOPIC: PARTITIONS, f"{FLIGHTS_TOPIC}.dlq": 1})
    produce_flights(bootstrap, events)
    in_memory = read_all(bootstrap, FLIGHTS_TOPIC, events)
    decoded = flights_decoded(in_memory)
    valid = sum(len(batch) for batches in decoded.values() for batch in batches)
    if valid != events:
        raise RuntimeError(f"flights: {events - valid:,} of {events:,} messages refused")
    with_file = sum(1 for _ in read_rows(FLIGHTS_FILE, "jsonl"))
    print(
        f"topic {FLIGHTS_TOPIC}: {events:,} messages in {PARTITIONS} partitions "
        f"(data/flights.jsonl.gz's {with_file:,} flights, {events / with_file:.1f} passes a "
        f"week apart; all valid), {mean_bytes(in_memory):,.0f} B each, "
        f"{partition_hours(decoded):,} partition-hours of event time"
    )
    return in_memory


def example_comparison(
    bootstrap: str,
    topic: str,
    args: argparse.Namespace,
    in_memory: dict[int, list[RecordBatch]],
    views_file: Path,
) -> dict[str, list[float]]:
    """(j) on its own: the flights views against the shipped views on the generator's topic,
    (c) and (e) each, interleaved rounds."""
    flights = prepare_flights(bootstrap, args.events)
    print(
        f"topic {topic}: {mean_bytes(in_memory):,.0f} B a message, "
        f"{partition_hours(_decoded(in_memory)):,} partition-hours of event time"
    )
    figures: dict[str, list[float]] = {}
    for round_no in range(1, args.repeat + 1):
        runs = {
            "c": lambda: worker_consume(
                bootstrap, topic, args.events, views_file, args.flush_interval, "confluent"
            ),
            "e": lambda: tasks_from_memory(topic, in_memory, views_file, args.flush_interval),
            "p": lambda: args.events / _view_seconds(topic, in_memory, load_views(views_file)),
        }
        for label, measure in runs.items():
            figures.setdefault(label, []).append(measure())
        for label, value in example_round(
            bootstrap, args.events, args.flush_interval, flights
        ).items():
            figures.setdefault(label, []).append(value)
        print(
            f"round {round_no}: "
            + ", ".join(f"({k}) {v[-1]:,.0f}" for k, v in figures.items())
            + " msg/s"
        )
    return figures


def print_example(figures: dict[str, list[float]], repeat: int) -> None:
    m = {k: statistics.median(v) for k, v in figures.items()}
    c, e = m["c"], m["e"]
    print(
        f"(j) one worker, shipped views, generator events : {c:>10,.0f} msg/s (median of {repeat})"
    )
    print(f"(j) one worker, flights views, flights topic    : {m['c flights']:>10,.0f} msg/s")
    print(f"(j) ratio flights / generator, worker           : {m['c flights'] / c:>10.2f}")
    print(f"(j) tasks from memory, shipped views            : {e:>10,.0f} msg/s")
    print(f"(j) tasks from memory, flights views            : {m['e flights']:>10,.0f} msg/s")
    print(f"(j) ratio flights / generator, from memory      : {m['e flights'] / e:>10.2f}")
    print(
        f"(j) ratio c/e, flights                          : {m['c flights'] / m['e flights']:>10.2f}"
    )
    if "p" in m:
        print(f"(j) the tasks, no flush nor checkpoint, shipped : {m['p']:>10,.0f} msg/s")
        print(f"(j) ratio flights / generator, no flush         : {m['p flights'] / m['p']:>10.2f}")
    print(f"(j) the tasks, no flush nor checkpoint, flights : {m['p flights']:>10,.0f} msg/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--flush-interval", type=float, default=5.0)
    parser.add_argument(
        "--decoder-only", action="store_true", help="only (g): the decoder's cost per message"
    )
    parser.add_argument(
        "--sessions-only", action="store_true", help="only (f): the session view's cost and memory"
    )
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only (a), (c) and (e) on librdkafka, windowed views and with the session view",
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="only (i): what the tasks hold between flushes, per event",
    )
    parser.add_argument(
        "--aggregations-only",
        action="store_true",
        help="only (h): each aggregation's cost, and sliding against tumbling windows",
    )
    parser.add_argument(
        "--example",
        choices=["flights"],
        help="only (j): one worker with the flights example's views against the shipped ones",
    )
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, load average {load_at_start}")

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
            if args.throughput_only:
                windowed_file = Path(tmp) / "windowed.yaml"
                windowed_file.write_text(_without_sessions(views_file.read_text()))
                _generate_topic(info.bootstrap, topic, args.events)
                in_memory = read_all(info.bootstrap, topic, args.events)
                figures = throughput(
                    info.bootstrap, topic, args, in_memory, windowed_file, views_file
                )
                print_throughput(figures, args.repeat, load_at_start)
                return 0
            if args.example:
                _generate_topic(info.bootstrap, topic, args.events)
                in_memory = read_all(info.bootstrap, topic, args.events)
                figures = example_comparison(info.bootstrap, topic, args, in_memory, views_file)
                print_machine(load_at_start)
                print_example(figures, args.repeat)
                return 0
            if args.memory_only:
                _generate_topic(info.bootstrap, topic, args.events)
                in_memory = read_all(info.bootstrap, topic, args.events)
                print_held_memory(held_memory(topic, in_memory, views_file))
                return 0
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
            memory: list[float] = []
            in_memory = read_all(info.bootstrap, topic, args.events)
            print_decoder_costs(
                decoder_cost(in_memory, args.repeat), nested_decoder_cost(args.events, args.repeat)
            )
            print_avro_costs(avro_decoder_cost(min(args.events, 100_000), args.repeat))
            if args.decoder_only:
                return 0
            print_held_memory(held_memory(topic, in_memory, views_file))
            print_aggregations(aggregation_costs(topic, in_memory, args.repeat), args.repeat)
            if args.aggregations_only:
                print(f"machine: {platform.platform()}, {platform.python_version()}")
                return 0
            costs = session_comparison(topic, in_memory, views_file, args.repeat)
            memory_use = session_memory(topic, in_memory, views_file)
            print_sessions(costs, memory_use, args.repeat)
            if args.sessions_only:
                return 0
            flights = prepare_flights(info.bootstrap, args.events)
            example: dict[str, list[float]] = {}
            for round_no in range(1, args.repeat + 1):
                memory.append(tasks_from_memory(topic, in_memory, views_file, args.flush_interval))
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
                print(f"round {round_no}, tasks from memory: {memory[-1]:,.0f} msg/s")
                for label, value in example_round(
                    info.bootstrap, args.events, args.flush_interval, flights
                ).items():
                    example.setdefault(label, []).append(value)
                print(
                    f"round {round_no}, flights example: worker {example['c flights'][-1]:,.0f} "
                    f"msg/s, tasks from memory {example['e flights'][-1]:,.0f} msg/s"
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
    e = statistics.median(memory)
    print(f"(e) the tasks from memory, no Kafka  : {e:>10,.0f} msg/s (median of {n})")
    print(f"ratio c/e (confluent worker / memory): {ca / e:>10.2f}")
    print_example(example | {"c": work["confluent"], "e": memory}, n)
    return 0


def _without_sessions(views_yaml: str) -> str:
    import yaml

    document = yaml.safe_load(views_yaml)
    document["views"] = [v for v in document["views"] if v.get("kind") != "session"]
    return yaml.safe_dump(document)


def _generate_topic(bootstrap: str, topic: str, events: int) -> None:
    _, report = generate(bootstrap, topic, events, "confluent")
    print(
        f"topic {topic}: {report.produced:,} messages in {PARTITIONS} partitions "
        f"({report.malformed_total} malformed, {report.duplicates} duplicates, {report.late} late)"
    )


def throughput(
    bootstrap: str,
    topic: str,
    args: argparse.Namespace,
    in_memory: dict[int, list[RecordBatch]],
    windowed_file: Path,
    views_file: Path,
) -> dict[str, list[float]]:
    """(a), (c) and (e) on librdkafka, windowed views and all the example views, interleaved
    rounds."""
    figures: dict[str, list[float]] = {}
    for round_no in range(1, args.repeat + 1):
        runs = {
            "a": lambda: plain_consume(bootstrap, topic, args.events, "confluent"),
            "c": lambda: worker_consume(
                bootstrap, topic, args.events, windowed_file, args.flush_interval, "confluent"
            ),
            "c+s": lambda: worker_consume(
                bootstrap, topic, args.events, views_file, args.flush_interval, "confluent"
            ),
            "e": lambda: tasks_from_memory(topic, in_memory, windowed_file, args.flush_interval),
            "e+s": lambda: tasks_from_memory(topic, in_memory, views_file, args.flush_interval),
        }
        for label, measure in runs.items():
            figures.setdefault(label, []).append(measure())
        print(
            f"round {round_no}: "
            + ", ".join(f"({k}) {v[-1]:,.0f}" for k, v in figures.items())
            + " msg/s"
        )
    return figures


def print_machine(load_at_start: tuple[float, float, float]) -> None:
    print()
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    print(f"load average at start {load_at_start}, at end {os.getloadavg()}")


def print_throughput(figures: dict[str, list[float]], repeat: int, load_at_start) -> None:
    m = {k: statistics.median(v) for k, v in figures.items()}
    print_machine(load_at_start)
    print(
        f"(a) raw confluent-kafka consumption           : {m['a']:>10,.0f} msg/s (median of {repeat})"
    )
    print(f"(c) one worker, example windowed views        : {m['c']:>10,.0f} msg/s")
    print(f"(c) the same, session view added              : {m['c+s']:>10,.0f} msg/s")
    print(f"(e) the tasks from memory, windowed views     : {m['e']:>10,.0f} msg/s")
    print(f"(e) the same, session view added              : {m['e+s']:>10,.0f} msg/s")
    print(f"ratio c/a                                     : {m['c'] / m['a']:>10.2f}")
    print(f"ratio c/e                                     : {m['c'] / m['e']:>10.2f}")


def print_sessions(costs: dict[str, float], memory_use: dict, repeat: int) -> None:
    print(
        f"(f) decoding and archiving, no view : {costs['no view']:>8.2f} us/event (median of {repeat})"
    )
    session = costs["session view"]
    for label, cost in costs.items():
        if label == "no view":
            continue
        ratio = "" if label == "session view" else f"  (session / this: {session / cost:.2f}x)"
        print(f"(f) {label:<32}: {cost:>8.2f} us/event beyond that{ratio}")
    print(
        f"(f) session state: {memory_use['open']:,} open sessions at "
        f"{memory_use['bytes_per_open']:,.0f} B each (what is left once the pending events and "
        f"closed rows are dropped); with {memory_use['closed_rows']:,} closed rows not flushed "
        f"yet and {memory_use['pending']:,} pending events, "
        f"{memory_use['bytes_total'] / 1e6:,.1f} MB in all"
    )


if __name__ == "__main__":
    sys.exit(main())
