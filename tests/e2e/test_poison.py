"""No record stops a task: hostile messages among valid ones are dead-lettered once
each with a reason, and a view that raises on one record gets that record quarantined, while
two ``sluice agent`` processes go on and every task ends Running. Judged against an oracle
computed from the topic (read back with kafka-python) and the dead-letter topic read with its
own kafka-python consumer."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
import yaml
from kafka import KafkaProducer

import tests.fixtures.poison  # noqa: F401  (the test process loads the views that name fails_on)
from pipelines.config import PROJECT_ROOT, KafkaSettings, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, replay
from pipelines.kafka import ensure_topics
from pipelines.kafka.writer import open_writer
from pipelines.views import load_views
from tests.fixtures.agents import PARTITIONS, Agents
from tests.fixtures.oracle import SessionTruth, Truth, valid_event
from tests.fixtures.stream import check_against_oracle, read_partitions, read_records

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

EVENTS = 12_000
BASE = {
    "event_id": "hostile",
    "event_time": 1_404_172_800_000,
    "org": "org-001",
    "client": "c1",
    "bytes_tx": 10,
    "session_id": "s1",
    "event_type": "view",
}


def _event(**changes) -> bytes:
    event = {**BASE, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not ...}).encode()


def _raw(**fields: str) -> bytes:
    """An event with some fields written as raw JSON text (NaN, huge numbers)."""
    text = _event(**dict.fromkeys(fields, "@@"))
    for name, raw in fields.items():
        text = text.replace(f'"{name}": "@@"'.encode(), f'"{name}": {raw}'.encode())
    return text


HOSTILE = {  # what a careless or hostile producer sends, and the reason expected for each
    "non-utf8": (b"\xff\xfe{\x00\x81garbage", "malformed_json"),
    "empty": (b"", "malformed_json"),
    "null value": (None, "empty"),
    "array": (b'[{"event_id": "x"}, 2, 3]', "not_an_object"),
    "string": (b'"just a string"', "not_an_object"),
    "null": (b"null", "not_an_object"),
    "nan": (_raw(bytes_tx="NaN"), "malformed_json"),
    "400 digits": (_raw(bytes_tx="1" + "0" * 399), "malformed_json"),
    "negative bytes": (_event(bytes_tx=-5), "out_of_range"),
    "boolean bytes": (_event(bytes_tx=True), "wrong_type"),
    "nested org": (_event(org={"name": "org-001"}), "wrong_type"),
    "missing org": (_event(org=...), "missing_field"),
    "null org": (_event(org=None), "wrong_type"),
    "empty org": (_event(org=""), "wrong_type"),
    "1970": (_event(event_time=1_000), "out_of_range"),
    "2200": (_event(event_time=7_258_118_400_000), "out_of_range"),
    "1 MB field": (_event(padding="x" * 1_000_000), "oversize"),
    "5,000 deep": (b'{"a":' * 5_000 + b"1" + b"}" * 5_000, "too_deep"),
    "5,000 deep extra": (
        _event()[:-1] + b', "x": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
        "too_deep",
    ),
    "string time": (_event(event_time="2014-07-01T00:00:00Z"), "wrong_type"),
}


def _views_file(tmp: Path, topic: str, extra: list[dict]) -> Path:
    document = yaml.safe_load((PROJECT_ROOT / "data" / "views.yaml").read_text())
    document["views"] += extra
    for view in document["views"]:
        view["topic"] = topic
    path = tmp / "views.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _stream(bootstrap, tmp: Path, topic: str, inject, extra_views=(), forget=()) -> dict:
    """Valid events with ``inject(producer)`` writing its messages half way; the oracle from
    what kafka-python reads back, with the records at positions ``forget`` (partition,
    offset) counted as dead letters (they are to be quarantined)."""
    ensure_topics(bootstrap, {topic: PARTITIONS, f"{topic}.dlq": 1})
    options = GeneratorOptions(seed=27, max_events=EVENTS, peak_rate=40_000, speedup=120)
    messages = []
    replay(load_trace("nyc_taxi"), options, messages.append, pace=False)
    writer = open_writer(bootstrap, KafkaSettings(client="confluent"))
    for m in messages[: EVENTS // 2]:
        writer.send(topic, m.key, m.value)
    writer.flush()
    injected = inject(topic)
    for m in messages[EVENTS // 2 :]:
        writer.send(topic, m.key, m.value)
    writer.flush()
    writer.close()
    contents = read_partitions(bootstrap, topic, PARTITIONS)
    for partition, offset in forget(contents) if callable(forget) else forget:
        contents[partition][offset] = None
    views_file = _views_file(tmp, topic, list(extra_views))
    views = load_views(views_file)
    defaults = SluiceSettings()
    limit, future = defaults.max_message_bytes, int(defaults.max_future_s * 1000)
    truth = Truth(views)
    sessions = {v.name: SessionTruth(v) for v in views if v.is_session}
    for p in range(PARTITIONS):
        truth.add_partition(contents[p], limit, future)
        for session_truth in sessions.values():
            session_truth.add_partition(p, contents[p], limit, future, settled_only=True)
    return {
        "topic": topic,
        "report": SimpleNamespace(malformed_total=truth.dead),
        "views": views,
        "views_file": views_file,
        "truth": truth,
        "sessions": sessions,
        "ends": {p: len(v) for p, v in contents.items()},
        "contents": contents,
        "injected": injected,
    }


def _dead_letters(bootstrap: str, topic: str) -> dict[tuple[int, int], set[str]]:
    """(partition, offset) -> the reasons given, from the whole dead-letter topic read by a
    consumer of its own (a replay after a crash may send a dead letter twice: same key)."""
    out: dict[tuple[int, int], set[str]] = defaultdict(set)
    for record in read_records(bootstrap, f"{topic}.dlq", 1)[0]:
        letter = orjson.loads(record.value)
        assert letter["source_topic"] == topic
        out[(letter["source_partition"], letter["source_offset"])].add(
            (letter["reason"], letter["detail"])
        )
    return out


def _run_two_agents(tmp_path, broker, stream, **env) -> Agents:
    agents = Agents(
        tmp_path, broker.bootstrap, stream, f"sqlite:///{tmp_path / 'control.db'}", **env
    )
    agents.start("a0")
    agents.start("a1")
    return agents


def test_hostile_messages_are_dead_lettered_once_each_and_no_agent_stops(broker, tmp_path):
    """Twenty hostile messages (a 5,000-deep one once crashed every agent) among valid
    events, on two agents: each hostile message is dead-lettered once with its reason, no
    valid one is, every task ends Running, the views equal the oracle."""

    def inject(topic: str) -> dict[tuple[int, int], str]:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=2 << 20)
        where = {}
        for i, (name, (value, _)) in enumerate(HOSTILE.items()):
            sent = producer.send(
                topic, key=name.encode(), value=value, partition=i % PARTITIONS
            ).get(timeout=30)
            where[(sent.partition, sent.offset)] = name
        producer.close()
        return where

    stream = _stream(broker.bootstrap, tmp_path, "hostile-events", inject)
    agents = _run_two_agents(tmp_path, broker, stream)
    try:
        agents.wait_until(
            lambda: agents.caught_up() and agents.all_running(), 90, "caught up, all Running", "a0"
        )
        assert agents.alive() == ["a0", "a1"]  # no agent ever exited
        assert not any(s.state == "Disabled" for s in agents.jobs.view_states())
        # stopped: every dead letter sent is in the topic (each task's last flush waits for it)
        assert agents.stop_all() == {"a0": 0, "a1": 0}
        letters = _dead_letters(broker.bootstrap, stream["topic"])
        for position, name in stream["injected"].items():
            reasons = {reason for reason, _ in letters.get(position, set())}
            assert reasons == {HOSTILE[name][1]}, f"{name} at {position}: {letters.get(position)}"
        # no valid message dead-lettered: exactly the positions the oracle calls bad
        assert set(letters) == _bad_positions(stream["contents"])
        assert all(len(reasons) == 1 for reasons in letters.values())
        check_against_oracle(stream, agents.store, agents.control)
    finally:
        agents.close()


def _bad_positions(contents: dict[int, list]) -> set[tuple[int, int]]:
    """Where the oracle says a record is not a usable event (invalid, or too far ahead of its
    partition's watermark)."""
    defaults = SluiceSettings()
    future = int(defaults.max_future_s * 1000)
    bad = set()
    for partition, values in contents.items():
        watermark = None
        for offset, value in enumerate(values):
            event = valid_event(value, defaults.max_message_bytes)
            if event is None or (
                watermark is not None and event["event_time"] > watermark + future
            ):
                bad.add((partition, offset))
                continue
            watermark = max(watermark or event["event_time"], event["event_time"])
    return bad


POISON = "poison-event-27"
FRAGILE = {
    "name": "fragile",
    "grouping_cols": ["org"],
    "interval": "1h",
    "allowed_lateness": "10m",
    "aggregation_info": [
        {
            "aggregation": "fails_on",
            "col_name": "event_id",
            "aggregated_col_name": "events",
            "params": {"value": POISON},
        }
    ],
}


def test_a_view_that_raises_on_one_record_gets_it_quarantined(broker, tmp_path):
    """A view whose update raises on one record (a custom aggregation loaded with
    SLUICE_AGGREGATOR_MODULES): that record is dead-lettered as crashed_task naming the view,
    everything else is processed and equals the oracle without it, the view stays enabled and
    no agent exits."""

    def inject(topic: str) -> dict[tuple[int, int], str]:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        sent = producer.send(topic, value=_event(event_id=POISON), partition=2).get(timeout=30)
        producer.close()
        return {(sent.partition, sent.offset): "poison"}

    def forget(contents):
        return [
            (p, o)
            for p, values in contents.items()
            for o, v in enumerate(values)
            if v and POISON.encode() in v
        ]

    stream = _stream(
        broker.bootstrap, tmp_path, "poison-events", inject, extra_views=[FRAGILE], forget=forget
    )
    (position,) = stream["injected"]
    agents = _run_two_agents(
        tmp_path, broker, stream, SLUICE_AGGREGATOR_MODULES="tests.fixtures.poison"
    )
    try:
        agents.wait_until(
            lambda: agents.caught_up() and agents.all_running(), 90, "caught up, all Running", "a0"
        )
        assert agents.alive() == ["a0", "a1"]
        assert agents.stop_all() == {"a0": 0, "a1": 0}
        letters = _dead_letters(broker.bootstrap, stream["topic"])
        quarantined = {k: v for k, v in letters.items() if any(r == "crashed_task" for r, _ in v)}
        assert list(quarantined) == [position]
        ((_, detail),) = quarantined[position]
        assert "view fragile" in detail and "PoisonedRecord" in detail
        task = f"{stream['topic']}:{position[0]}"
        assert not agents.jobs.disabled_views(task)
        crashes = agents.control.crashes.of_task(task)
        # the batch that held it, then the record alone: a third would be a restart that did
        # not know of a crash (the worker keeps a crashed task running() until it is recorded)
        assert [c.view for c in crashes] == ["fragile", "fragile"], crashes
        assert all(c.covers(position[1]) for c in crashes), crashes
        assert crashes[-1].first_offset == position[1] and crashes[-1].end_offset == position[1] + 1
        assert any(e.state == "Quarantined" for e in agents.jobs.events(task))
        row = next(t for t in agents.control.tasks() if t.task == task)
        assert row.views["dead_letter_reasons"].get("crashed_task") == 1
        assert row.views["quarantined"] == 1
        check_against_oracle(stream, agents.store, agents.control)
    finally:
        agents.close()
