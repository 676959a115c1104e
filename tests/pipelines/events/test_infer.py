"""Inference proposes a valid declaration and marks, never hides, what the sample leaves open."""

from __future__ import annotations

import json

import yaml

from pipelines.events.declaration import ColumnType, TimeFormat, TopicDeclaration
from pipelines.events.infer import infer_declaration
from pipelines.events.times import epoch_format_of, read_time_ms


def payments(n: int = 20) -> list[bytes]:
    rows = []
    for i in range(n):
        rows.append(
            {
                "payment_id": f"p-{i}",
                "merchant": f"m{i % 3}",
                "amount": 10.5 + i,
                "card": {"country": "FR" if i % 2 else None, "brand": "visa"},
                "refund_reason": None,
                "created_at": f"2024-05-01T10:{i:02d}:00+02:00",
                "items": [{"sku": f"s{i}"}, {"sku": "x"}],
                "flex": i if i % 2 else str(i),
            }
        )
    return [json.dumps(r).encode() for r in rows]


def test_nested_nulls_iso_time_and_an_id() -> None:
    inference = infer_declaration([*payments(), b"not json", b"[1, 2]"], "payments")
    decl = inference.declaration
    assert decl.event_time.path == "created_at"
    assert decl.event_time.format is TimeFormat.ISO8601
    assert decl.id == "payment_id"
    by_name = {f.name: f for f in decl.fields}
    assert by_name["card_country"].path == "card.country"
    assert by_name["card_country"].nullable
    assert not by_name["card_brand"].nullable
    assert by_name["amount"].type is ColumnType.DOUBLE
    assert by_name["items_0_sku"].path == "items[0].sku"
    assert "created_at" not in by_name  # it is the event time
    assert inference.not_objects == 2 and inference.sampled == 20
    assert any("mixed types" in n for n in inference.notes["flex"])


def test_the_yaml_validates_and_marks_the_ambiguous_lines() -> None:
    inference = infer_declaration(payments(), "payments")
    text = inference.as_yaml()
    [entry] = yaml.safe_load(text)["topics"]
    assert TopicDeclaration.model_validate(entry) == inference.declaration
    flex_line = next(line for line in text.splitlines() if "name: flex" in line)
    assert "# ambiguous: mixed types" in flex_line
    as_json = json.loads(inference.as_json())
    TopicDeclaration.model_validate(as_json["topics"][0])
    assert any(n.startswith("flex: mixed types") for n in as_json["notes"])


def test_a_count_in_the_epoch_seconds_range_and_numbers_in_strings_are_marked() -> None:
    rows = [
        json.dumps({"ts": 1_714_550_000_000 + i, "views": 1_700_000_000 + i, "zip": f"{7500 + i}"})
        for i in range(5)
    ]
    inference = infer_declaration(rows, "t")
    assert inference.declaration.event_time.format is TimeFormat.EPOCH_MS
    assert inference.declaration.event_time.path == "ts"
    assert "epoch time (epoch_s) or a count" in " ".join(inference.notes["views"])
    assert "numbers written as strings" in " ".join(inference.notes["zip"])
    assert "several time candidates" in " ".join(inference.notes["event_time"])


def test_pattern_times_and_no_time_at_all() -> None:
    rows = [json.dumps({"when": f"2024-05-01 10:00:{i:02d}", "n": i}) for i in range(3)]
    decl = infer_declaration(rows, "t").declaration
    assert decl.event_time.format is TimeFormat.PATTERN
    assert decl.event_time.pattern == "%Y-%m-%d %H:%M:%S"
    inference = infer_declaration([json.dumps({"n": 1}), json.dumps({"n": 2})], "t")
    assert inference.declaration.event_time.source == "record"
    assert inference.notes["event_time"]


def test_time_reading() -> None:
    assert epoch_format_of(1_714_550_000) is TimeFormat.EPOCH_S
    assert epoch_format_of(1_714_550_000_000_000_000) is TimeFormat.EPOCH_NS
    assert epoch_format_of(42) is None
    assert read_time_ms("2024-05-01T10:00:00+02:00", None) == 1_714_550_400_000
    assert read_time_ms("2024-05-01T08:00:00Z", TimeFormat.ISO8601) == 1_714_550_400_000
    assert read_time_ms(1_714_550_400, None) == 1_714_550_400_000
