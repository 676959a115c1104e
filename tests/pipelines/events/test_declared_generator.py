"""The decoder built from the generator's declaration (data/topics.yaml) gives exactly what the
hand-written decoder gives: columns, watermarks, dead letters (reasons and details)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.config import PROJECT_ROOT
from pipelines.events import decode
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import NO_WATERMARK
from pipelines.generator.decoder import decode_batch
from tests.pipelines.events.test_decoder import BASE, _event, _hostile, _joinable, _messages

GENERATOR = TopicDeclaration(
    **yaml.safe_load((PROJECT_ROOT / "data" / "topics.yaml").read_text())["topics"][0]
)


@dataclass
class Rec:
    offset: int
    value: bytes | None
    timestamp: int = 0


def _both(values, watermark=NO_WATERMARK, max_bytes=1024, future=3_600_000):
    records = [Rec(i, v, 1_000 + i) for i, v in enumerate(values)]
    kwargs = {"max_message_bytes": max_bytes, "max_future_ms": future}
    return (
        decode_batch(records, watermark, **kwargs),
        decoder_for(GENERATOR)(records, watermark, **kwargs),
    )


def _assert_same(old, new) -> None:
    assert sorted(old.columns) == sorted(new.columns)
    for name, column in old.columns.items():
        assert new.columns[name].dtype == column.dtype, name
        assert list(new.columns[name]) == list(column), name
    for name in ("offsets", "kafka_timestamps", "prior_watermark"):
        got, expected = getattr(new, name), getattr(old, name)
        assert got.dtype == expected.dtype and list(got) == list(expected), name
    # the hand-written baseline names no field; the declared decoder names the one its
    # detail is about (the generator's names are their paths)
    assert [replace(d, field=None) for d in new.dead_letters] == old.dead_letters
    for d in new.dead_letters:
        if d.reason in ("missing_field", "wrong_type", "out_of_range"):
            assert d.field is not None and d.field in d.detail, d
        else:
            assert d.field is None, d
    assert (new.watermark, new.consumed, new.next_offset) == (
        old.watermark,
        old.consumed,
        old.next_offset,
    )
    assert type(new.watermark) is int
    assert not new.nulls


HOSTILE = [
    b'{"event_id": "x", ',
    b"[1, 2]",
    orjson.dumps({k: v for k, v in BASE.items() if k != "org"}),
    orjson.dumps({k: v for k, v in BASE.items() if k not in ("event_id", "event_time")}),
    orjson.dumps({k: v for k, v in BASE.items() if k not in ("org", "event_time")}),
    _event(bytes_tx="10"),
    _event(bytes_tx=True),
    _event(bytes_tx=1.5),
    _event(org=""),
    _event(org=None),
    _event(org={"name": "org-001"}),
    _event(bytes_tx=-5),
    _event(bytes_tx=-5, event_time=12),
    _event(bytes_tx=2**63),
    _event(event_time=12),
    _event(event_time=7_258_118_400_000),
    _event(event_time="2014-07-01T00:00:00Z"),
    _event(padding="x" * 2000),
    _event(extra={"a": [1, 2]}),
    _event(event_time=BASE["event_time"] + 3 * 3_600_000),
    b"\xff\xfe{\x00\x81garbage",
    b"",
    b"null",
    b'{"a":' * 5_00 + b"1" + b"}" * 5_00,
    None,
]


def test_every_hostile_kind_is_read_alike():
    values = [_event(event_id=f"e{i}") for i in range(3)] + HOSTILE + [_event(event_id="last")]
    old, new = _both(values)
    assert len(old.dead_letters) == len(HOSTILE) - 1  # all bad but the extra field
    _assert_same(old, new)


@pytest.mark.parametrize("run", [2, 32])
@settings(max_examples=120, deadline=None)
@given(st.lists(st.one_of(_messages(), _hostile(), _joinable()), min_size=1, max_size=40))
def test_any_messages_are_read_alike(run, values):
    default, decode.RUN = decode.RUN, run
    try:
        old, new = _both(values)
    finally:
        decode.RUN = default
    _assert_same(old, new)


def test_many_events_far_ahead_and_a_carried_watermark_are_read_alike():
    t = BASE["event_time"]
    values = [
        _event(event_id=f"e{i}", event_time=t + (i % 7) * 2 * 3_600_000 + i) for i in range(200)
    ]
    for watermark in (NO_WATERMARK, t + 5 * 3_600_000):
        _assert_same(*_both(values, watermark))
    old, new = _both([])
    assert len(new) == 0 and new.next_offset == old.next_offset == -1
    assert np.array_equal(new.offsets, old.offsets)
