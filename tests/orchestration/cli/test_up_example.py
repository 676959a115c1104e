"""`sluice up --views FILE --replay EVENTS`: which topic it runs on, what it replays, the hours
Dagster gets; and the replay of the shipped flights file, read back with kafka-python."""

from __future__ import annotations

import gzip
import json
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer

from orchestration.cli import main
from orchestration.cli.up_source import (
    file_span,
    hours_span,
    reads_generator_events,
    replay_command,
    up_topic,
)
from pipelines.config import PROJECT_ROOT, get_settings
from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import SluiceError
from pipelines.generator.progress import ReplayProgress
from pipelines.views.topics import ANY_TOPIC, default_declarations

FLIGHTS = PROJECT_ROOT / "data" / "flights.jsonl.gz"


def _flights() -> TopicDeclaration:
    (entry,) = yaml.safe_load((PROJECT_ROOT / "data" / "flights.yaml").read_text())["topics"]
    return TopicDeclaration.model_validate(entry)


def _messages() -> list[dict]:
    with gzip.open(FLIGHTS, "rt") as handle:
        return [json.loads(line) for line in handle]


class _View:
    def __init__(self, topic: str) -> None:
        self.topic = topic


def test_up_runs_on_the_topic_its_views_read() -> None:
    flights = [_View("flights"), _View("flights")]
    assert up_topic(flights, "events", chosen=False) == "flights"
    assert up_topic([*flights, _View("events")], "events", chosen=False) == "events"
    assert up_topic(flights, "mine", chosen=True) == "mine"
    with pytest.raises(SluiceError, match=r"2 topics \(flights, payments\).*SLUICE_TOPIC"):
        up_topic([*flights, _View("payments")], "events", chosen=False)


def test_only_the_generators_declaration_gets_the_generators_trace() -> None:
    generator = default_declarations()[ANY_TOPIC].model_copy(update={"topic": "events"})
    assert reads_generator_events(generator)
    assert not reads_generator_events(_flights())


def test_dagster_gets_the_hours_the_file_covers() -> None:
    times = [datetime.fromisoformat(m["departure"]["scheduled"]) for m in _messages()]
    first, last = min(times).astimezone(UTC), max(times).astimezone(UTC)
    start = first.replace(hour=0, minute=0).strftime("%Y-%m-%d-%H:%M")
    end = last.replace(minute=0).timestamp() + 3600
    assert file_span(FLIGHTS, _flights()) == (
        start,
        datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d-%H:%M"),
    )
    assert hours_span(3600.0, 7200.0) == ("1970-01-01-00:00", "1970-01-01-02:00")
    assert hours_span(7200.0, 7201.0) == ("1970-01-01-00:00", "1970-01-01-03:00")
    assert hours_span(0.0, 0.0) == ("1970-01-01-00:00", "1970-01-01-01:00")


def test_the_replay_is_paced_by_the_declared_time() -> None:
    cmd = replay_command(
        FLIGHTS, "flights", "/v/flights.yaml", _flights(), 3600.0, Path("/s/progress.json")
    )
    assert cmd[:4] == [sys.executable, "-m", "orchestration.cli", "replay"]
    assert cmd[4:] == [
        str(FLIGHTS),
        "--topic",
        "flights",
        "--progress",
        "/s/progress.json",
        "--views",
        "/v/flights.yaml",
        "--speedup",
        "3600",
        "--time-field",
        "departure.scheduled",
        "--time-format",
        "iso8601",
    ]
    record_time = _flights().model_copy(update={"event_time": {"source": "record"}})
    record_time = TopicDeclaration.model_validate(record_time.model_dump())
    assert replay_command(FLIGHTS, "t", None, record_time, 1.0, Path("p"))[-1] == (
        "--as-fast-as-possible"
    )


@pytest.fixture
def bootstrap(broker, monkeypatch) -> str:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap)
    monkeypatch.setenv("SLUICE_KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap)
    get_settings.cache_clear()
    yield broker.bootstrap
    get_settings.cache_clear()


def test_the_shipped_file_replays_whole_with_its_progress(bootstrap, tmp_path, capsys) -> None:
    """`up --replay data/flights.jsonl.gz` runs this: the gzipped file, every message once, and
    a progress record `up` shows (done, all produced, the file's span of event time)."""
    topic = f"flights-{uuid.uuid4().hex[:8]}"
    progress = tmp_path / "progress.json"
    views = str(PROJECT_ROOT / "data" / "flights.yaml")
    args = ["replay", str(FLIGHTS), "--topic", topic, "--views", views]
    args += ["--time-field", "departure.scheduled", "--time-format", "iso8601"]  # as `up` does
    assert main([*args, "--progress", str(progress)]) == 0
    expected = _messages()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        got = [json.loads(m.value) for m in consumer]
    finally:
        consumer.close()
    key = json.dumps
    assert sorted(map(key, got)) == sorted(map(key, expected))
    times = [datetime.fromisoformat(m["departure"]["scheduled"]).timestamp() for m in expected]
    record = ReplayProgress.read(progress)
    assert record is not None and record.done and record.produced == len(expected)
    assert record.total_sim_s == pytest.approx(max(times) - min(times))
    assert "0 bad rows" in capsys.readouterr().err


def _source(monkeypatch, tmp_path, **env: str):
    import argparse

    from orchestration.cli.up import Source
    from orchestration.control_plane.runtime import Runtime

    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    base = Runtime.from_env()
    args = argparse.Namespace(
        views=str(PROJECT_ROOT / "data" / "flights.yaml"), replay=FLIGHTS, trace="nyc_taxi"
    )
    return Source(args, base), base


def test_up_on_the_flights_example_replays_its_file_on_its_topic(monkeypatch, tmp_path) -> None:
    """Needs the archive to hold declared topics (the views must load)."""
    monkeypatch.delenv("SLUICE_TOPIC", raising=False)
    monkeypatch.delenv("SLUICE_MAX_FUTURE_S", raising=False)
    source, base = _source(monkeypatch, tmp_path)
    assert (source.topic, source.generator, source.file) == ("flights", False, FLIGHTS)
    assert source.span == file_span(FLIGHTS, _flights())
    settings = source.settings(base.settings, set(base.settings.model_fields_set))
    assert settings.topic == "flights"
    assert settings.views_file == PROJECT_ROOT / "data" / "flights.yaml"
    assert settings.max_future_s == 24 * 3600
    chosen, base = _source(monkeypatch, tmp_path, SLUICE_MAX_FUTURE_S="60")
    assert chosen.settings(base.settings, set(base.settings.model_fields_set)).max_future_s == 60
