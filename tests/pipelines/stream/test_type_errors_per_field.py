"""Type errors are counted per field: a declared topic with hostile values in two fields,
under both ``on_type_error`` modes. The task's counts (dead-lettered and nulled, per field and
reason), its checkpoint, `sluice status` and the report's dead letters per field all equal an
independent count over the produced messages (plain Python reading each message's fields)."""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import fastavro
import pyarrow.parquet as pq
import pytest
import yaml
from rich.console import Console
from xxhash import xxh64_intdigest

from orchestration.cli.status import render_type_errors
from orchestration.control_plane.lag import TaskLag
from pipelines.config import SluiceSettings
from pipelines.events.avro import avro_decoder_for
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.decode import NO_WATERMARK
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views
from quality.causes import read_hour_archive
from quality.reconcile.results import Reconciliation
from quality.report import ReportData, ReportPlots, render_html, render_json, render_markdown
from quality.schemas import validate_dead_letters

HOUR = 1_404_208_800_000  # 2014-07-01 10:00 UTC
TOPIC = "pay"


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes | None
    key: bytes | None = None


def _declaration(on_type_error: str) -> TopicDeclaration:
    return TopicDeclaration(
        topic=TOPIC,
        fields=(
            {"name": "merchant", "type": "string"},
            {"name": "amount", "type": "double", "minimum": 0},
            {"name": "qty", "type": "long", "path": "item.qty", "minimum": 1},
        ),
        event_time={"path": "ts", "format": "epoch_ms"},
        on_type_error=on_type_error,
    )


def _messages(n: int, seed: int) -> list[dict]:
    """Mostly valid payments; some with a hostile amount, qty, or both."""
    rng = random.Random(seed)
    amounts = [lambda: "12.5", lambda: -3.0, lambda: None, lambda: [1]]
    quantities = [lambda: 1.5, lambda: 0, lambda: "2", lambda: -5, "absent"]
    out = []
    for i in range(n):
        m = {
            "merchant": f"m{i % 5}",
            "amount": round(rng.uniform(0, 100), 2),
            "item": {"qty": rng.randint(1, 9)},
            "ts": HOUR + i * 1000,
        }
        roll = rng.random()
        if roll < 0.12 or 0.2 <= roll < 0.25:
            m["amount"] = rng.choice(amounts)()
        if 0.1 <= roll < 0.25:
            bad = rng.choice(quantities)
            if bad == "absent":
                del m["item"]["qty"]
            else:
                m["item"]["qty"] = bad()
        out.append(m)
    return out


def _problem(value, kind: str, minimum: float) -> str | None:
    """Plain Python: why a value does not fit ``kind`` (long, double) with its minimum."""
    if kind == "long":
        if type(value) is not int:
            return "wrong_type"
        return "out_of_range" if value < minimum or value > 2**63 - 1 else None
    if type(value) not in (int, float):
        return "wrong_type"
    return "out_of_range" if value < minimum else None


def _outcomes(messages: list[dict], soft: bool) -> list[tuple[tuple | None, list]]:
    """Per message, from the message itself: the (field, reason) it is dead-lettered for (or
    None) and the (field, reason) of each value made null. A missing field first, then wrong
    types in declared order, then ranges; under ``null`` a field's wrong type or range makes
    it null."""
    out: list[tuple[tuple | None, list]] = []
    for m in messages:
        if "qty" not in m["item"]:
            out.append((("qty", "missing_field"), []))
            continue
        problems = [
            ("amount", _problem(m["amount"], "double", 0)),
            ("qty", _problem(m["item"]["qty"], "long", 1)),
        ]
        problems = [(f, p) for f, p in problems if p is not None]
        if soft or not problems:
            out.append((None, problems))
        else:
            ordered = [p for p in problems if p[1] == "wrong_type"] or problems
            out.append((ordered[0], []))
    return out


def _oracle(messages: list[dict], soft: bool) -> tuple[Counter, Counter]:
    """(dead-lettered, nulled) per (field, reason)."""
    dead: Counter = Counter()
    nulled: Counter = Counter()
    for letter, made_null in _outcomes(messages, soft):
        if letter is not None:
            dead[letter] += 1
        nulled.update(made_null)
    return dead, nulled


def _as_json(dead: Counter, nulled: Counter) -> dict:
    out: dict = {}
    for outcome, counts in (("dead_lettered", dead), ("nulled", nulled)):
        for (name, reason), n in counts.items():
            out.setdefault(outcome, {}).setdefault(name, {})[reason] = n
    return out


def _task(tmp_path, declaration: TopicDeclaration, bucket: int = 0, factor: int = 1) -> StreamTask:
    views_file = tmp_path / "views.yaml"
    views_file.write_text(
        yaml.safe_dump(
            {
                "topics": [declaration.model_dump(mode="json", exclude_defaults=True)],
                "views": [
                    {
                        "name": "revenue",
                        "topic": TOPIC,
                        "grouping_cols": ["merchant"],
                        "interval": "10m",
                        "allowed_lateness": "2m",
                        "aggregation_info": [
                            {"aggregation": "count", "aggregated_col_name": "payments"},
                            {
                                "aggregation": "sum",
                                "col_name": "amount",
                                "aggregated_col_name": "revenue",
                            },
                            {
                                "aggregation": "max",
                                "col_name": "qty",
                                "aggregated_col_name": "qty_max",
                            },
                        ],
                    }
                ],
            }
        )
    )
    views = load_views(views_file)
    settings = SluiceSettings(state_dir=tmp_path / "state")
    store = LocalObjectStore(settings.resolved_storage_root)
    sink = CollectingDeadLetters()
    return StreamTask(TOPIC, 0, views, store, sink, settings, bucket=bucket, factor=factor)


@pytest.mark.parametrize("mode", ["dead_letter", "null"])
def test_type_errors_are_counted_per_field_as_the_messages_say(tmp_path, mode: str) -> None:
    soft = mode == "null"
    messages = _messages(3_000, seed=46)
    dead, nulled = _oracle(messages, soft)
    assert {f for f, _ in dead | nulled} == {"amount", "qty"}, "both fields must be hostile"
    assert len({r for _, r in dead | nulled}) >= 2
    assert bool(nulled) == soft
    records = [Rec(i, HOUR + i, json.dumps(m).encode()) for i, m in enumerate(messages)]

    task = _task(tmp_path, _declaration(mode))
    task.start_at(0)
    for lo in range(0, len(records), 500):  # runs of the fast path, and messages off it
        task.process(records[lo : lo + 500])
    want = _as_json(dead, nulled)
    assert task.type_errors.as_json() == want
    letters = [d for _, _, d in task.sink.letters]
    assert Counter((d.field, d.reason) for d in letters) == dead
    status = task.status("w1", len(records))
    assert status.views["type_errors"] == want

    # kept across a restart from the checkpoint
    task.checkpoint()
    again = _task(tmp_path, _declaration(mode))
    again.restore()
    assert again.type_errors.as_json() == want

    # sluice status: one row per topic, field and reason, with both counts
    console = Console(record=True, width=160)
    console.print(render_type_errors([TaskLag(status, 0, None, 0.0, False)]))
    text = console.export_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 5 and cells[0] == TOPIC:
            rows[(cells[1], cells[2])] = (cells[3], cells[4])
    assert rows == {
        key: tuple(f"{c[key]:,}" if c[key] else "-" for c in (dead, nulled))
        for key in dead | nulled
    }

    # the report's causes: dead letters per field, from the archive's dead-letter files
    task.flush()
    causes = read_hour_archive(task.store, TOPIC, HOUR, []).causes()
    # a dead letter belongs to the hour of the watermark before it: none before the first event
    outcomes = _outcomes(messages, soft)
    first = next(i for i, (letter, _) in enumerate(outcomes) if letter is None)
    per_field = Counter(letter[0] for letter, _ in outcomes[first:] if letter is not None)
    assert dict(causes.dead_letter_fields) == dict(per_field)
    assert causes.dead_letters == sum(per_field.values())

    # the report: its per-field table, in the Markdown summary, the HTML and the JSON
    day = datetime.fromtimestamp(HOUR / 1000, tz=UTC).date()
    views = [s.view for s in task.states.values()]
    hours = [Reconciliation("revenue", HOUR, False, None, causes)]
    data = ReportData(day, views, hours, {}, [])
    markdown = render_markdown(data)
    table = markdown.split("## Dead letters per field (day totals)")
    assert (len(table) == 2) == bool(per_field)
    if per_field:
        rows = [ln for ln in table[1].splitlines() if ln.startswith("| revenue |")]
        assert rows == [f"| revenue | {f} | {n:,} |" for f, n in sorted(per_field.items())]
    page = render_html(data, ReportPlots({"revenue": None}, None, None, None))
    assert ('id="dead-letter-fields"' in page) == bool(per_field)
    document = json.loads(render_json(data))
    assert document["causes_total"]["revenue"]["dead_letter_fields"] == dict(per_field)


def test_nothing_to_show_when_no_value_misfits(tmp_path) -> None:
    task = _task(tmp_path, _declaration("dead_letter"))
    task.start_at(0)
    task.process([Rec(0, HOUR, json.dumps(_messages(1, seed=1)[0]).encode())])
    status = task.status("w1", 1)
    assert status.views["type_errors"] == {}
    assert render_type_errors([TaskLag(status, 0, None, 0.0, False)]) is None


def test_dead_letter_files_without_the_field_column_read_as_null(tmp_path) -> None:
    """Files archived before the field was kept count in the total, under no field."""
    task = _task(tmp_path, _declaration("dead_letter"))
    task.start_at(0)
    drawn = _messages(400, seed=7)
    outcomes = _outcomes(drawn, soft=False)
    messages = [m for m, (letter, _) in zip(drawn, outcomes, strict=True) if letter is None][:200]
    bad = {**messages[5], "amount": "x"}
    records = [Rec(i, HOUR + i, json.dumps(m).encode()) for i, m in enumerate([*messages, bad])]
    task.process(records)
    task.flush()
    store = task.store
    (key,) = [k for k in store.list("archive/dead_letters/") if k.endswith(".parquet")]
    table = pq.read_table(io.BytesIO(store.get(key)))
    assert table.column("field").to_pylist() == ["amount"]
    old = io.BytesIO()
    pq.write_table(table.drop_columns(["field"]), old)
    store.put(key, old.getvalue())
    causes = read_hour_archive(store, TOPIC, HOUR, []).causes()
    assert causes.dead_letters == 1
    assert causes.dead_letter_fields == ()
    assert json.loads(json.dumps(causes.as_dict()))["dead_letter_fields"] == {}


AVRO_SCHEMA = {
    "type": "record",
    "name": "Pay",
    "fields": [
        {"name": "merchant", "type": "string"},
        {"name": "amount", "type": ["double", "string", "null"]},
        {
            "name": "item",
            "type": {
                "type": "record",
                "name": "Item",
                "fields": [{"name": "qty", "type": ["long", "double", "string"]}],
            },
        },
        {"name": "ts", "type": "long"},
    ],
}


@pytest.mark.parametrize("mode", ["dead_letter", "null"])
def test_the_avro_decoder_names_the_field_and_counts_nulled_values(tmp_path, mode: str) -> None:
    """Hostile values an Avro union lets through: the same counts as the messages give."""
    schema_file = tmp_path / "pay.avsc"
    schema_file.write_text(json.dumps(AVRO_SCHEMA))
    declaration = TopicDeclaration(
        **{
            **_declaration(mode).model_dump(mode="json", exclude_defaults=True),
            "encoding": "avro",
            "schema_file": str(schema_file),
            "framing": "plain",
        }
    )
    decoder = avro_decoder_for(declaration, None)
    messages = [  # what an Avro union can carry: no absent field, no list
        m for m in _messages(2_000, seed=47) if "qty" in m["item"] and type(m["amount"]) is not list
    ]
    soft = mode == "null"
    dead, nulled = _oracle(messages, soft)
    assert {f for f, _ in dead | nulled} == {"amount", "qty"}
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    values = []
    for m in messages:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, m)
        values.append(out.getvalue())
    batch = decoder(
        [Rec(i, HOUR + i, v) for i, v in enumerate(values)],
        NO_WATERMARK,
        max_message_bytes=10**6,
        max_future_ms=10**9,
    )
    assert Counter((d.field, d.reason) for d in batch.dead_letters) == dead
    assert Counter(batch.nulled) == nulled


def test_the_archive_check_reads_dead_letters_written_before_the_field_column(tmp_path) -> None:
    task = _task(tmp_path, _declaration("dead_letter"))
    task.start_at(0)
    good = {"merchant": "m", "amount": 1.0, "item": {"qty": 2}, "ts": HOUR}
    bad = {**good, "amount": "x"}
    task.process([Rec(i, HOUR, json.dumps(m).encode()) for i, m in enumerate([good, bad])])
    task.flush()
    (key,) = [k for k in task.store.list("archive/dead_letters/") if k.endswith(".parquet")]
    table = pq.read_table(io.BytesIO(task.store.get(key)))
    assert validate_dead_letters(table)["field"].tolist() == ["amount"]
    older = table.drop_columns(["field"])
    assert validate_dead_letters(older)["field"].isna().all()
    assert validate_dead_letters(older.to_pandas())["field"].isna().all()


@pytest.mark.parametrize("mode", ["dead_letter", "null"])
def test_each_key_bucket_counts_the_type_errors_of_its_own_records(tmp_path, mode: str) -> None:
    """A key bucket decodes its siblings' records too (for the partition's watermark) but
    dead-letters and counts only its own: per bucket, the counts of the messages whose key
    hashes (XXH64, computed here) to it."""
    soft = mode == "null"
    factor = 4
    messages = _messages(3_000, seed=47)
    keys = [f"k{i % 13}".encode() for i in range(len(messages))]
    records = [
        Rec(i, HOUR + i, json.dumps(m).encode(), key)
        for i, (m, key) in enumerate(zip(messages, keys, strict=True))
    ]
    buckets = []
    for b in range(factor):
        (tmp_path / str(b)).mkdir()
        buckets.append(_task(tmp_path / str(b), _declaration(mode), b, factor))
        buckets[-1].start_at(0)
    for lo in range(0, len(records), 500):
        for task in buckets:
            task.process(records[lo : lo + 500])
    for b, task in enumerate(buckets):
        own = [
            m for m, key in zip(messages, keys, strict=True) if xxh64_intdigest(key) % factor == b
        ]
        assert own
        dead, nulled = _oracle(own, soft)
        assert bool(nulled) == soft
        assert task.type_errors.as_json() == _as_json(dead, nulled)
        assert Counter((d.field, d.reason) for _, _, d in task.sink.letters) == dead
        assert task.consumed == len(own)
