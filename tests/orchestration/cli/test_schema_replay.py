"""`sluice schema infer` and `sluice replay` against the real broker; read back with kafka-python."""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer

from orchestration.cli import main
from orchestration.control_plane.runtime import Runtime
from pipelines.config import get_settings
from pipelines.events.declaration import TopicDeclaration
from pipelines.generator.file_replay import TimeField, read_rows, replay_file


@pytest.fixture
def bootstrap(broker, monkeypatch) -> str:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap)
    monkeypatch.setenv("SLUICE_KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap)
    get_settings.cache_clear()
    yield broker.bootstrap
    get_settings.cache_clear()


def _topic() -> str:
    return f"own-{uuid.uuid4().hex[:8]}"


def _read_back(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes | None, dict]]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        got = [(m.key, json.loads(m.value)) for m in consumer]
    finally:
        consumer.close()
    assert len(got) == expected
    return got


PAYMENTS = [
    {
        "payment_id": f"p-{i}",
        "merchant": f"m{i % 3}",
        "amount": 10.5 + i,
        "card": {"country": "FR" if i % 2 else None},
        "refund_reason": None,
        "created_at": f"2024-05-01T10:{i:02d}:00+02:00",
        "flex": i if i % 2 else str(i),
    }
    for i in range(30)
]


def test_infer_from_a_topic(bootstrap, capsys) -> None:
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for row in PAYMENTS:
        producer.send(topic, json.dumps(row).encode())
    producer.send(topic, b"garbage")
    producer.flush()
    producer.close()
    assert main(["schema", "infer", "--topic", topic, "--sample", "1000"]) == 0
    out = capsys.readouterr()
    [entry] = yaml.safe_load(out.out)["topics"]
    declaration = TopicDeclaration.model_validate(entry)
    assert declaration.topic == topic
    assert declaration.event_time.path == "created_at"
    assert declaration.id == "payment_id"
    fields = {f.name: f for f in declaration.fields}
    assert fields["card_country"].path == "card.country" and fields["card_country"].nullable
    assert "# ambiguous: mixed types" in next(
        line for line in out.out.splitlines() if "name: flex" in line
    )
    assert "1 not JSON objects" in out.out
    # --sample bounds the read: 5 messages, of which "sampled" counts the JSON objects (the
    # garbage, last on a partition chosen at random, is among the first 5 read when that
    # partition holds few and is read first)
    assert main(["schema", "infer", "--topic", topic, "--sample", "5", "--format", "json"]) == 0
    bounded = json.loads(capsys.readouterr().out)
    assert bounded["sampled"] + bounded["not_objects"] == 5


def test_infer_from_a_file_and_clear_errors(bootstrap, tmp_path, capsys) -> None:
    path = tmp_path / "payments.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in PAYMENTS) + "\n")
    assert main(["schema", "infer", "--file", str(path), "--format", "json"]) == 0
    proposal = json.loads(capsys.readouterr().out)
    assert TopicDeclaration.model_validate(proposal["topics"][0]).topic == "payments"
    assert main(["schema", "infer", "--file", str(tmp_path / "none.jsonl")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["schema", "infer", "--topic", f"missing-{uuid.uuid4().hex[:6]}"]) == 1
    assert "no topic" in capsys.readouterr().err


def test_replay_jsonl_keyed_with_a_bad_row(bootstrap, tmp_path, capsys) -> None:
    topic = _topic()
    path = tmp_path / "p.jsonl"
    lines = [json.dumps(r) for r in PAYMENTS]
    lines.insert(3, "{broken")
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(path), "--topic", topic, "--key-field", "merchant"]) == 0
    assert "p.jsonl:4" in capsys.readouterr().err
    got = _read_back(bootstrap, topic, len(PAYMENTS))
    assert sorted(got, key=lambda kv: kv[1]["payment_id"]) == sorted(
        ((r["merchant"].encode(), r) for r in PAYMENTS), key=lambda kv: kv[1]["payment_id"]
    )


def test_a_replayed_file_records_where_its_input_ends_unless_open_ended(
    bootstrap, tmp_path
) -> None:
    """So the archive sensor can close the file's last hours, as after `sluice generate`."""
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in PAYMENTS))
    runtime = Runtime.from_env()
    try:
        topic = _topic()
        assert main(["replay", str(path), "--topic", topic, "--key-field", "merchant"]) == 0
        end = runtime.control.input_ends.of_topic(topic)
        assert end is not None and sum(end.end_offsets.values()) == len(PAYMENTS)
        open_topic = _topic()
        assert main(["replay", str(path), "--topic", open_topic, "--open-ended"]) == 0
        assert runtime.control.input_ends.of_topic(open_topic) is None
        _read_back(bootstrap, open_topic, len(PAYMENTS))
    finally:
        runtime.control.close()


def test_replay_csv_typed_by_the_declaration(bootstrap, tmp_path, capsys) -> None:
    topic = _topic()
    views = tmp_path / "views.yaml"
    views.write_text(
        yaml.safe_dump(
            {
                "topics": [
                    {
                        "topic": topic,
                        "event_time": {"path": "created_at", "format": "iso8601"},
                        "fields": [
                            {"name": "merchant", "type": "string"},
                            {"name": "amount", "type": "double"},
                            {"name": "qty", "type": "long"},
                            {"name": "ok", "type": "boolean"},
                            {
                                "name": "country",
                                "path": "card.country",
                                "type": "string",
                                "nullable": True,
                            },
                        ],
                    }
                ]
            }
        )
    )
    path = tmp_path / "p.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["merchant", "amount", "qty", "ok", "card.country", "created_at"])
        for i in range(10):
            writer.writerow(
                [
                    f"m{i}",
                    1.5 * i,
                    i,
                    "true" if i % 2 else "false",
                    "FR" if i % 2 else "",
                    f"2024-05-01T10:{i:02d}:00Z",
                ]
            )
        writer.writerow(["bad", "1.0", "not-a-number", "true", "FR", "2024-05-01T11:00:00Z"])
    assert main(["replay", str(path), "--topic", topic, "--views", str(views)]) == 0
    assert "p.csv:12" in capsys.readouterr().err
    got = sorted((v for _, v in _read_back(bootstrap, topic, 10)), key=lambda v: v["qty"])
    assert got == [
        {
            "merchant": f"m{i}",
            "amount": 1.5 * i,
            "qty": i,
            "ok": bool(i % 2),
            "card": {"country": "FR" if i % 2 else None},
            "created_at": f"2024-05-01T10:{i:02d}:00Z",
        }
        for i in range(10)
    ]


def test_replay_parquet_as_it_is(bootstrap, tmp_path) -> None:
    topic = _topic()
    rows = [{"id": f"e{i}", "n": i, "x": i / 4, "tag": None if i % 3 else "t"} for i in range(25)]
    path = tmp_path / "events.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert main(["replay", str(path), "--topic", topic, "--as-fast-as-possible"]) == 0
    got = sorted((v for _, v in _read_back(bootstrap, topic, 25)), key=lambda v: v["n"])
    assert got == rows


def test_pacing_at_a_speedup_takes_the_expected_time(tmp_path) -> None:
    """Rows 0.2 event-seconds apart at speedup 2: the last is due 0.1 s x (n - 1) after the first.
    A row without a time is reported with its line and skipped."""
    n, step_s, speedup = 11, 0.2, 2.0
    path = tmp_path / "t.jsonl"
    lines = [json.dumps({"ts": 1_714_550_400_000 + int(i * step_s * 1000)}) for i in range(n)]
    lines.insert(5, json.dumps({"other": 1}))
    path.write_text("\n".join(lines) + "\n")
    sent: list[bytes] = []
    bad = []
    report = replay_file(
        read_rows(path, "jsonl"),
        lambda key, value: sent.append(value),
        time_field=TimeField("ts"),
        speedup=speedup,
        on_bad=bad.append,
    )
    expected_s = (n - 1) * step_s / speedup
    assert report.produced == n == len(sent)
    assert [b.line for b in bad] == [6]
    assert expected_s * 0.95 <= report.wall_s <= expected_s + 1.0


def test_ctrl_c_stops_after_the_rows_sent(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({"n": i}) for i in range(10)) + "\n")
    sent: list[bytes] = []

    def send(key: bytes | None, value: bytes) -> None:
        if len(sent) == 3:
            raise KeyboardInterrupt
        sent.append(value)

    report = replay_file(read_rows(path, "jsonl"), send)
    assert report.stopped and report.produced == 3 == len(sent)


def test_an_unreachable_broker_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("SLUICE_KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    monkeypatch.setenv("SLUICE_KAFKA_TIMEOUT_S", "1")
    get_settings.cache_clear()
    path = tmp_path / "t.jsonl"
    path.write_text('{"n": 1}\n')
    try:
        assert main(["schema", "infer", "--topic", "t"]) == 1
        assert main(["replay", str(path), "--topic", "t"]) == 1
    finally:
        get_settings.cache_clear()
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all(e.startswith("sluice: error:") for e in errors)


def test_help_and_docs_name_both_commands(capsys) -> None:
    for command in (["schema", "infer"], ["replay"]):
        with pytest.raises(SystemExit) as exited:
            main([*command, "--help"])
        assert exited.value.code == 0
        assert "examples:" in capsys.readouterr().out
    docs = (Path(__file__).resolve().parents[3] / "docs" / "stream.md").read_text()
    assert "sluice schema infer --topic" in docs and "sluice replay FILE" in docs
