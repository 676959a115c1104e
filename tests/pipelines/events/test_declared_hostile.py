"""Hostile messages for each declared type: each dead-lettered exactly once, with its reason
and a detail naming the field, the declared type and the value's start; nothing raises.
Nulls and on_type_error: null as docs/stream.md describes them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson
import pytest

from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import NO_WATERMARK

FIELDS = (
    {"name": "merchant", "type": "string", "path": "merchant.name"},
    {"name": "amount", "type": "double", "minimum": 0},
    {"name": "items", "type": "long"},
    {"name": "refund", "type": "boolean"},
    {"name": "settled", "type": "timestamp", "format": "epoch_s", "nullable": True},
    {"name": "reason", "type": "string", "nullable": True},
    {"name": "sku", "type": "string", "path": "lines[1].sku", "nullable": True},
)
GOOD = {
    "merchant": {"name": "m1"},
    "amount": 12.5,
    "items": 3,
    "refund": False,
    "settled": 1_404_201_600.5,
    "created": "2014-07-01T10:00:00.250+02:00",
    "lines": [{"sku": "a"}, {"sku": "b"}],
}


def _declaration(**changes) -> TopicDeclaration:
    return TopicDeclaration(
        topic="payments",
        fields=FIELDS,
        event_time={"path": "created", "format": "iso8601"},
        **changes,
    )


@dataclass
class Rec:
    offset: int
    value: bytes | None
    timestamp: int = 0


def _decode(values, **changes):
    records = [Rec(i, v) for i, v in enumerate(values)]
    return decoder_for(_declaration(**changes))(
        records, NO_WATERMARK, max_message_bytes=4096, max_future_ms=3_600_000
    )


def _with(**changes) -> bytes:
    event = {**GOOD, **changes}
    return orjson.dumps({k: v for k, v in event.items() if v is not ...})


HOSTILE = [
    (
        _with(merchant={"name": 5}),
        "wrong_type",
        "merchant.name must be a non-empty string, got int 5",
    ),
    (_with(merchant="m1"), "wrong_type", "merchant must be an object, got str 'm1'"),
    (_with(merchant=...), "missing_field", "missing field 'merchant.name'"),
    (_with(amount="12.5"), "wrong_type", "amount must be a number, got str"),
    (_with(amount=-1), "out_of_range", "amount -1 < 0"),
    (_with(items=True), "wrong_type", "items must be an integer, got bool True"),
    (_with(items=2.0), "wrong_type", "items must be an integer, got float 2.0"),
    (_with(items=2**64 - 1), "out_of_range", "items 18446744073709551615 > 9223372036854775807"),
    (_with(refund="no"), "wrong_type", "refund must be true or false, got str 'no'"),
    (_with(settled="soon"), "wrong_type", "settled must be a number (epoch_s), got str 'soon'"),
    (_with(settled=1e11), "out_of_range", "settled 100000000000.0 is 100000000000000 ms, outside"),
    (_with(created="2014-07-01T10:00:00"), "wrong_type", "created must be an ISO-8601 time"),
    (_with(created="2014-02-30T10:00:00Z"), "wrong_type", "created must be an ISO-8601 time"),
    (_with(created="1999-12-31T23:59:59Z"), "out_of_range", "created '1999-12-31T23:59:59Z' is"),
    (_with(created=...), "missing_field", "missing field 'created'"),
    (_with(lines="x"), "wrong_type", "lines must be an array, got str 'x'"),
    (_with(lines=[[1], {"sku": 7}]), "wrong_type", "lines[1].sku must be a string, got int 7"),
    (
        _with(extra="[" * 70 + "]" * 70)[:-1] + b',"deep":' + b"[" * 70 + b"]" * 70 + b"}",
        "too_deep",
        "nested 71 levels deep",
    ),
    (b'{"amount": 1' + b"0" * 400 + b"}", "malformed_json", ""),
]


@pytest.mark.parametrize(("value", "reason", "detail"), HOSTILE)
def test_each_hostile_message_is_dead_lettered_once_with_its_reason(value, reason, detail):
    batch = _decode([_with(), value, _with(reason="fraud")])
    assert [(d.offset, d.reason) for d in batch.dead_letters] == [(1, reason)]
    assert detail in batch.dead_letters[0].detail
    assert list(batch.offsets) == [0, 2]


def test_values_and_nulls_as_columns():
    batch = _decode(
        [
            _with(),
            _with(settled=None, reason=..., lines=[{"sku": "a"}]),
            _with(settled=1_404_201_600, lines=None, amount=3),
        ]
    )
    c = batch.columns
    assert list(c["event_time"]) == [1_404_201_600_250] * 3
    assert list(c["merchant"]) == ["m1"] * 3
    assert c["amount"].dtype == np.float64 and list(c["amount"]) == [12.5, 12.5, 3.0]
    assert c["items"].dtype == np.int64 and c["refund"].dtype == np.bool_
    assert list(c["settled"]) == [1_404_201_600_500, 0, 1_404_201_600_000]
    assert list(batch.nulls) == ["settled"] and list(batch.nulls["settled"]) == [False, True, False]
    assert list(c["reason"]) == [None, None, None]
    assert list(c["sku"]) == ["b", None, None]


def test_on_type_error_null_keeps_the_message_with_the_field_null():
    values = [_with(items="3"), _with(amount=-1), _with(created="yesterday"), _with(items=...)]
    batch = _decode(values, on_type_error="null")
    assert list(batch.offsets) == [0, 1]
    assert list(batch.nulls["items"]) == [True, False]
    assert list(batch.nulls["amount"]) == [False, True]
    assert [d.reason for d in batch.dead_letters] == ["wrong_type", "missing_field"]


def test_the_record_timestamp_as_event_time():
    records = [Rec(0, _with(), 1_404_201_600_000), Rec(1, _with(), 5)]
    batch = decoder_for(
        TopicDeclaration(topic="p", fields=FIELDS, event_time={"source": "record"})
    )(records, NO_WATERMARK, max_message_bytes=4096, max_future_ms=0)
    assert list(batch.columns["event_time"]) == [1_404_201_600_000]
    assert [d.reason for d in batch.dead_letters] == ["out_of_range"]
