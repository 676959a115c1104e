"""Nothing lost: archived offsets chain, add up and match the broker; removed files are named.

The archive comes from real stream tasks (``run_stream``, small batches and frequent
checkpoints, so every partition has many ranges); the broker test archives a fresh topic
through a real ``StreamWorker`` reading the session broker.
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from assets.partitions import partition_key_for
from assets.raw import raw_archive
from assets.raw.lineage_checks import (
    NOTHING_LOST_CHECK,
    broker_offset_bounds,
    build_nothing_lost_check,
    evaluate_nothing_lost,
)
from orchestration.resources import ClusterKafkaResource, KafkaResource, LocalStorageResource
from pipelines.config import SluiceSettings
from pipelines.exceptions import BrokerUnavailable
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kafka import ensure_topics, producer
from pipelines.segments import RangeRecord, archive_range_key, hour_label, read_range_records
from pipelines.storage import LocalObjectStore, ObjectStore
from pipelines.stream import StreamWorker, TaskId, open_worker_clients
from pipelines.testing import StreamRun, run_stream
from quality.completeness import merge_ranges
from quality.lineage import check_nothing_lost, format_offsets
from tests.fixtures.dagster_fixture import copy_storage, example_views
from tests.fixtures.processes import wait_until

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

OPTIONS = GeneratorOptions(max_events=3000, peak_rate=20000.0, malformed_share=0.01)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StreamRun]:
    """A storage root with ~8 ranges per partition over three event-time hours."""
    root = tmp_path_factory.mktemp("lineage") / "storage"
    run = run_stream(
        root, example_views()[:1], options=OPTIONS, partitions=3, batch_size=100, checkpoint_every=1
    )
    return root, run


@pytest.fixture
def store(built, tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(str(copy_storage(built[0], tmp_path / "storage")))


def _broker(run: StreamRun) -> dict[tuple[str, int], tuple[int, int]]:
    """What a broker holding exactly the run's records would say."""
    return {(run.topic, p): (0, len(records)) for p, records in run.partitions.items()}


def _offsets(store: ObjectStore, key: str) -> list[int]:
    return pq.read_table(io.BytesIO(store.get(key)), columns=["offset"])["offset"].to_pylist()


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if runs and runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs


def _middle_record(store: ObjectStore, partition: int = 1) -> tuple[RangeRecord, list[RangeRecord]]:
    records = [r for r in read_range_records(store) if r.partition == partition]
    assert len(records) >= 5, "the fixture should give every partition several ranges"
    return records[len(records) // 2], records


def test_a_clean_archive_loses_nothing_and_adds_up(built) -> None:
    root, run = built
    store = LocalObjectStore(str(root))
    report = check_nothing_lost(store, broker_offsets=_broker(run))
    assert [h.hour_ms for h in report] == run.event_hours()
    covered: dict[str, set[tuple[int, int]]] = {}
    for hour in report:
        assert hour.passed, hour.failures
        assert hour.events + hour.dead_letters == hour.produced > 0
        assert hour.as_dict()["notes"] == []  # the broker holds nothing unarchived
        for part in hour.partitions:
            assert part.events + part.dead_letters == part.produced
            assert part.missing == part.duplicated == () and part.missing_files == ()
            covered.setdefault(part.source, set()).update(part.archived)
    # over all hours the ranges cover every offset the run produced, nothing more
    for p, records in run.partitions.items():
        assert merge_ranges(list(covered[f"events-{p}"])) == [(0, len(records))]
    dead = sum(
        n for r in read_range_records(store) for n in r.dead_letters.values()
    )  # every malformed message is archived as a dead letter
    assert dead == len(run.dead_letters.letters) > 0


def test_a_removed_events_file_is_named_with_its_exact_offsets(store, built) -> None:
    _, run = built
    record, _ = _middle_record(store)
    key = next(f for f in record.files if f.startswith("archive/events/"))
    lost = _runs(_offsets(store, key))
    store.delete(key)

    report = check_nothing_lost(store, broker_offsets=_broker(run))
    carried = {label for label, n in {**record.events, **record.dead_letters}.items() if n}
    assert {h.label for h in report if not h.passed} == carried  # every hour the range carries
    for hour in (h for h in report if not h.passed):
        (part,) = [p for p in hour.partitions if not p.passed]
        assert part.source == "events-1"
        assert part.missing == tuple(lost)
        assert part.missing_files == (key,)
        assert part.events + part.dead_letters == part.produced - sum(b - a for a, b in lost)
        text = " ".join(part.failures)
        assert (
            f"events-1: range [{record.first}, {record.end}) lists {key}, which is missing" in text
        )
        assert f"offsets {format_offsets(lost)} of events-1 are missing from the archive" in text
        assert f"the broker still holds them, a replay from {lost[0][0]} recovers them" in text
        assert all(p.passed for p in hour.partitions if p.source != "events-1")

    # the broker's log already starts past them: they are gone for good
    retained = {("events", 1): (lost[-1][1], len(run.partitions[1]))}
    gone = check_nothing_lost(store, broker_offsets=retained)
    assert any("the broker no longer holds them" in f for h in gone for f in h.failures)


def test_a_removed_range_record_is_a_hole_in_the_chain(store, built) -> None:
    _, run = built
    record, records = _middle_record(store)
    before, after = records[records.index(record) - 1], records[records.index(record) + 1]
    store.delete(archive_range_key(record.topic, record.partition, record.first, record.end))

    report = check_nothing_lost(store, broker_offsets=_broker(run))
    neighbour_hours = {
        h for r in (before, after) for h, n in {**r.events, **r.dead_letters}.items() if n
    }
    assert {h.label for h in report if not h.passed} == neighbour_hours
    hole = f"offsets [{record.first}, {record.end}) of events-1 are missing from the archive"
    for hour in report:
        if hour.passed:
            continue
        assert hour.missing == {"events-1": ((record.first, record.end),)}
        (message,) = hour.failures
        assert message.startswith(hole) and "no range record covers them" in message
        assert f"a replay from {record.first} recovers them" in message


def test_the_chain_is_held_to_the_log_start_and_the_checkpoint(store, built) -> None:
    _, run = built
    records = [r for r in read_range_records(store) if r.partition == 2]
    first, last = records[0], records[-1]
    for gone in (first, last):
        store.delete(archive_range_key(gone.topic, gone.partition, gone.first, gone.end))
    # the archive alone cannot see the missing head, but the checkpoint exposes the tail
    alone = [f for h in check_nothing_lost(store) for f in h.failures]
    assert alone and all(f"[{last.first}, {last.end}) of events-2" in f for f in alone)
    assert any(f"the task checkpointed offset {last.end}" in f for f in alone)

    failures = [
        f for h in check_nothing_lost(store, broker_offsets=_broker(run)) for f in h.failures
    ]
    assert any(
        f.startswith(f"offsets [0, {first.end}) of events-2 are missing")
        and f"the archive starts at {first.end}, the broker's log at 0" in f
        for f in failures
    )


def test_overlapping_ranges_and_bad_input_are_reported(store) -> None:
    record, _ = _middle_record(store, partition=0)
    copy = json.loads(store.get(archive_range_key("events", 0, record.first, record.end)))
    copy["first"] = record.first + 1  # a stray record claiming offsets another one holds
    store.put(
        archive_range_key("events", 0, record.first + 1, record.end), json.dumps(copy).encode()
    )
    failures = [f for h in check_nothing_lost(store) for f in h.failures]
    assert any(
        f"offsets [{record.first + 1}, {record.end}) of events-0 are archived twice" in f
        for f in failures
    )
    assert any("hold offsets outside it: " + str(record.first) in f for f in failures)

    with pytest.raises(ValueError, match=r"epoch-ms starts of UTC hours, got \[123\]"):
        check_nothing_lost(store, [123])
    with pytest.raises(ValueError, match="broker offsets of events-0: log start 9 and end 3"):
        check_nothing_lost(store, broker_offsets={("events", 0): (9, 3)})


class UnreachableKafka(KafkaResource):
    """A broker that never answers."""

    def bootstrap(self) -> str:
        raise BrokerUnavailable("no broker answers at 127.0.0.1:1")

    def client_settings(self):  # pragma: no cover - never reached
        raise AssertionError


def _range_tags(hours: list[int]) -> dict[str, str]:
    return {
        "dagster/asset_partition_range_start": partition_key_for(hours[0]),
        "dagster/asset_partition_range_end": partition_key_for(hours[-1]),
    }


def _materialize(root: Path, hours: list[int], kafka: KafkaResource) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [raw_archive, build_nothing_lost_check()],
        resources={"storage": LocalStorageResource(root=str(root)), "kafka": kafka},
        tags=_range_tags(hours),
        raise_on_error=False,
    )


def test_the_dagster_check_passes_then_blocks_with_metadata(built, tmp_path: Path) -> None:
    root, run = built
    hours = run.event_hours()
    resources = {"storage": LocalStorageResource(root=str(root)), "kafka": UnreachableKafka()}
    context = dg.build_asset_check_context(resources=resources)
    evaluation = build_nothing_lost_check()(context)  # not partitioned: every archived hour
    assert evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN  # no broker: archive only
    metadata = evaluation.metadata
    assert metadata["broker"].value.startswith("unreachable, archive-only check: no broker")
    assert metadata["hours"].value == len(hours) and metadata["hours_failed"].value == 0
    per_hour = metadata[f"hour {hour_label(hours[1])}"].value
    assert per_hour["events"] + per_hour["dead_letters"] == per_hour["produced"] > 0
    assert per_hour["missing"] == {}

    damaged = copy_storage(root, tmp_path / "damaged")
    store = LocalObjectStore(str(damaged))
    record, _ = _middle_record(store)
    key = next(f for f in record.files if f.startswith("archive/events/"))
    lost = _runs(_offsets(store, key))
    store.delete(key)
    failed = _materialize(damaged, hours, UnreachableKafka())
    (evaluation,) = failed.get_asset_check_evaluations()
    assert evaluation.check_name == NOTHING_LOST_CHECK
    assert not evaluation.passed and not failed.success  # blocking: the run fails
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert key in evaluation.description
    missing = [v.value["missing"] for k, v in evaluation.metadata.items() if k.startswith("hour ")]
    assert {"events-1": [list(r) for r in lost]} in missing
    assert any(key in f for f in evaluation.metadata["failures"].value)


def _produce(bootstrap: str, topic: str, seed: int) -> int:
    out = producer(bootstrap)
    sent = replay(
        load_trace("Twitter_volume_AAPL"),
        GeneratorOptions(max_events=1500, seed=seed, peak_rate=20000.0, malformed_share=0.01),
        lambda m: out.send(topic, key=m.key, value=m.value),
        pace=False,
    )
    out.flush()
    out.close()
    return sent.produced


@pytest.mark.broker
def test_against_the_broker_a_removed_file_can_be_replayed(broker, topic_name, tmp_path) -> None:
    ensure_topics(broker.bootstrap, {topic_name: 2, f"{topic_name}.dlq": 1})
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        flush_interval_s=1.0,
        checkpoint_interval_s=1.0,
        dead_letter_topic=f"{topic_name}.dlq",
    )
    store = LocalObjectStore(str(tmp_path / "storage"))
    tasks = [TaskId(topic_name, p) for p in range(2)]
    clients = open_worker_clients(broker.bootstrap, None, topic_name)
    worker = StreamWorker("lineage", tasks, [], settings, clients, store)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    produced = 0
    try:
        for seed in (5, 6):  # two rounds, so each partition archives several ranges
            produced += _produce(broker.bootstrap, topic_name, seed)
            wait_until(
                lambda target=produced: (
                    sum(t.archive.first for t in worker.tasks.values()) >= target
                ),
                60,
                f"the worker archiving {produced} messages",
            )
    finally:
        worker.stop_event.set()
        thread.join(30)
    assert not thread.is_alive()

    kafka = ClusterKafkaResource(
        bootstrap_servers=broker.bootstrap, security_protocol="PLAINTEXT", sasl_mechanism=None
    )
    bounds = broker_offset_bounds(kafka, [topic_name])
    assert set(bounds) == {(topic_name, 0), (topic_name, 1)}
    assert all(start == 0 for start, _ in bounds.values())
    assert sum(end for _, end in bounds.values()) == produced
    report = check_nothing_lost(store, broker_offsets=bounds)
    assert report and all(h.passed for h in report), [h.failures for h in report]
    assert sum(h.events + h.dead_letters for h in report) >= produced
    assert all(h.as_dict()["notes"] == [] for h in report)
    result = evaluate_nothing_lost(store, None, kafka)
    assert result.passed and result.metadata["broker"].value == "log start and end offsets compared"

    records = read_range_records(store, topic_name)
    record = records[len(records) // 2]
    key = next(f for f in record.files if f.startswith("archive/events/"))
    lost = _runs(_offsets(store, key))
    store.delete(key)
    result = evaluate_nothing_lost(store, None, kafka)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    source = f"{topic_name}-{record.partition}"
    assert (
        f"offsets {format_offsets(lost)} of {source} are missing from the archive"
        in result.description
    )
    assert f"the broker still holds them, a replay from {lost[0][0]} recovers them" in (
        result.description
    )
