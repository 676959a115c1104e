"""The decoder: bad input becomes a dead letter with its reason, never an exception."""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.events.decode import (
    FUTURE_EVENT_TIME,
    MAX_JSON_DEPTH,
    NO_WATERMARK,
)
from pipelines.generator.decoder import _classify, decode_batch
from pipelines.generator.events import EVENT_FIELDS

BASE = {
    "event_id": "e1",
    "event_time": 1_404_172_800_000,
    "org": "org-001",
    "client": "c1",
    "bytes_tx": 10,
    "session_id": "s1",
    "event_type": "view",
}


@dataclass
class Rec:
    offset: int
    value: bytes | None
    timestamp: int = 0


def _decode(values, watermark=NO_WATERMARK):
    records = [Rec(i, v) for i, v in enumerate(values)]
    return decode_batch(records, watermark, max_message_bytes=1024, max_future_ms=3_600_000)


def _event(**changes):
    return orjson.dumps({**BASE, **changes})


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b'{"event_id": "x", ', "malformed_json", ""),
        (b"[1, 2]", "not_an_object", "expected a JSON object, got list"),
        (
            orjson.dumps({k: v for k, v in BASE.items() if k != "org"}),
            "missing_field",
            "missing field 'org'",
        ),
        (_event(bytes_tx="10"), "wrong_type", "bytes_tx must be an integer, got str"),
        (_event(bytes_tx=True), "wrong_type", "bytes_tx must be an integer, got bool"),
        (_event(org=""), "wrong_type", "org must be a non-empty string"),
        (_event(bytes_tx=-5), "out_of_range", "bytes_tx -5 < 0"),
        (_event(event_time=12), "out_of_range", "event_time 12 outside"),
        (_event(padding="x" * 2000), "oversize", "bytes > max_message_bytes 1024"),
        (None, "empty", "message has no value"),
    ],
)
def test_each_kind_of_bad_input_is_dead_lettered_with_its_reason(value, reason, detail):
    batch = _decode([_event(), value, _event(event_id="e2")])
    assert len(batch) == 2
    assert [d.reason for d in batch.dead_letters] == [reason]
    assert detail in batch.dead_letters[0].detail
    assert batch.dead_letters[0].offset == 1
    assert batch.consumed == 3 and batch.next_offset == 3


def test_far_future_events_are_dead_lettered_relative_to_the_watermark():
    future = BASE["event_time"] + 2 * 3_600_000
    batch = _decode(
        [_event(), _event(event_time=future), _event(event_time=BASE["event_time"] + 1)]
    )
    assert [d.reason for d in batch.dead_letters] == ["future_event_time"]
    assert batch.watermark == BASE["event_time"] + 1


def test_watermark_before_each_event_does_not_depend_on_batch_cuts():
    times = [100_000, 500_000, 200_000, 900_000, 300_000, 950_000]
    values = [
        _event(event_id=f"e{i}", event_time=BASE["event_time"] + t) for i, t in enumerate(times)
    ]
    whole = _decode(values)
    first = _decode(values[:3])
    second = decode_batch(
        [Rec(i + 3, v) for i, v in enumerate(values[3:])],
        first.watermark,
        max_message_bytes=1024,
        max_future_ms=3_600_000,
    )
    assert list(whole.prior_watermark) == list(first.prior_watermark) + list(second.prior_watermark)
    assert whole.watermark == second.watermark == BASE["event_time"] + 950_000


# --- the fast path (msgspec) and the exact classifier never disagree ----------------------

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)


@st.composite
def _messages(draw) -> bytes | None:
    """A valid event with a few of its fields broken, dropped or added, or raw junk."""
    kind = draw(st.sampled_from(["event", "event", "event", "junk", "none", "list", "deep"]))
    if kind == "none":
        return None
    if kind == "deep":  # around the depth limit, or many brackets inside a string
        depth = draw(st.integers(MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH + 2))
        if draw(st.booleans()):
            return orjson.dumps({**BASE, "event_type": "[" * depth})
        return orjson.dumps(BASE)[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"
    if kind == "junk":
        return draw(st.binary(max_size=40))
    if kind == "list":
        return orjson.dumps(draw(st.lists(_json_scalars, max_size=3)))
    event = {
        **BASE,
        "event_time": BASE["event_time"] + draw(st.integers(0, 3_000_000)),
        "bytes_tx": draw(st.integers(0, 10_000)),
    }
    for name in draw(st.lists(st.sampled_from(sorted(BASE)), max_size=2, unique=True)):
        if draw(st.booleans()):
            del event[name]
        else:
            event[name] = draw(_json_scalars)
    if draw(st.booleans()):
        event["extra"] = draw(_json_scalars)
    return orjson.dumps(event)


def _reference(values, watermark=NO_WATERMARK):
    """The slow path alone: each message through the exact classifier, then the watermark."""
    accepted, dead, wm = [], [], watermark
    for offset, value in enumerate(values):
        checked = _classify(value, 1024)
        if type(checked) is tuple:
            dead.append((offset, checked[0]))
            continue
        t = checked.event_time
        if wm != NO_WATERMARK and t > wm + 3_600_000:
            dead.append((offset, FUTURE_EVENT_TIME))
            continue
        accepted.append((offset, wm, *(getattr(checked, f) for f in EVENT_FIELDS)))
        wm = max(wm, t)
    return accepted, dead, wm


def _assert_agrees_with_the_reference(values, batch) -> None:
    """``batch`` (the decoder's output for ``values``) is what the exact classifier says."""
    accepted = [
        (int(o), int(w), *(batch.columns[f][i] for f in EVENT_FIELDS))
        for i, (o, w) in enumerate(zip(batch.offsets, batch.prior_watermark, strict=True))
    ]
    expected, dead, wm = _reference(values)
    assert accepted == expected
    assert [(d.offset, d.reason) for d in batch.dead_letters] == dead
    assert batch.watermark == wm
    assert batch.consumed == len(values)


@settings(max_examples=300, deadline=None)
@given(st.lists(_messages(), min_size=1, max_size=30))
def test_the_fast_path_agrees_with_the_exact_classifier(values):
    _assert_agrees_with_the_reference(values, _decode(values))


# --- no input makes the decoder raise ------------------------------------------------------


def _nested(depth: int, kind: str) -> bytes:
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    if kind == "array":
        return b"[" * depth + b"]" * depth
    if kind == "event":  # a valid event carrying one deep extra field
        inner = b"[" * depth + b"]" * depth
        return orjson.dumps(BASE)[:-1] + b',"extra":' + inner + b"}"
    return b"[" * depth  # unclosed


_json = st.recursive(
    _json_scalars | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def _hostile(draw) -> bytes | None:
    """Anything a producer could send: raw bytes, any JSON, deep nesting, brackets inside
    strings, literals no decoder takes as an int, events with a field of any JSON value or not
    UTF-8."""
    kind = draw(st.sampled_from(["bytes", "json", "deep", "event", "literal", "none", "brackets"]))
    if kind == "none":
        return None
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":  # the standard library writes NaN, Infinity and integers of any size
        return json.dumps(draw(_json)).encode()
    if kind == "deep":
        depth = draw(st.sampled_from([63, 64, 65, 100, 1_000, 5_000, 10_000]))
        return _nested(depth, draw(st.sampled_from(["object", "array", "event", "open"])))
    if kind == "brackets":  # many brackets, all inside strings: not deep
        return orjson.dumps({**BASE, "event_type": "{[" * draw(st.integers(30, 200))})
    if kind == "literal":  # a field's value as JSON no decoder accepts as an int
        name = draw(st.sampled_from(sorted(BASE)))
        literal = draw(
            st.sampled_from(
                [b"NaN", b"1" + b"0" * 400, b"-1" + b"0" * 400, b"1e999", b'"\\ud800"', b"2e3"]
            )
        )
        return orjson.dumps({**BASE, name: 0}).replace(
            f'"{name}":0'.encode(), f'"{name}":'.encode() + literal
        )
    event = dict(BASE)
    event[draw(st.sampled_from(sorted(BASE)))] = draw(_json)
    raw = json.dumps(event).encode()
    if draw(st.booleans()):  # not UTF-8
        raw = raw.replace(b"org-001", b"org-\xff\xfe")
    return raw


@settings(max_examples=250, deadline=None)
@given(st.lists(_hostile(), min_size=1, max_size=20))
def test_decoding_never_raises_and_classifies_each_message_once(values):
    batch = _decode(values)
    seen = [int(o) for o in batch.offsets] + [d.offset for d in batch.dead_letters]
    assert sorted(seen) == list(range(len(values)))  # each offset exactly once
    assert all(d.reason and d.detail for d in batch.dead_letters)
    assert batch.consumed == len(values)


@pytest.mark.parametrize("kind", ["object", "array", "event", "open"])
@pytest.mark.parametrize("depth", [5_000, 10_000])
def test_deep_nesting_is_dead_lettered_as_too_deep(kind, depth):
    """Deep nesting must not raise RecursionError out of the fast path (5,000 levels did)."""
    batch = decode_batch(
        [Rec(0, _event()), Rec(1, _nested(depth, kind)), Rec(2, _event(event_id="e2"))],
        NO_WATERMARK,
        max_message_bytes=1 << 20,
        max_future_ms=3_600_000,
    )
    assert list(batch.offsets) == [0, 2]
    assert [(d.offset, d.reason) for d in batch.dead_letters] == [(1, "too_deep")]
    levels = depth + 1 if kind == "event" else depth
    assert f"nested {levels} levels deep" in batch.dead_letters[0].detail


def test_brackets_inside_strings_do_not_count_as_depth():
    value = orjson.dumps({**BASE, "event_type": "{[" * 500, "note": 'a \\" {{{ "'})
    batch = decode_batch([Rec(0, value)], NO_WATERMARK, max_message_bytes=1 << 20, max_future_ms=0)
    assert len(batch) == 1 and not batch.dead_letters


def test_nesting_up_to_the_limit_is_decoded():
    assert len(_decode([_nested(MAX_JSON_DEPTH - 1, "event")])) == 1
    assert [d.reason for d in _decode([_nested(MAX_JSON_DEPTH, "event")]).dead_letters] == [
        "too_deep"
    ]


def test_the_classifier_turns_its_own_failure_into_a_dead_letter(monkeypatch):
    import pipelines.events.decode as decode

    def broken(value):
        raise RuntimeError("a bug")

    monkeypatch.setattr(decode, "json_depth", broken)
    checked = _classify(_nested(100, "array"), 1 << 20)
    assert checked == ("decoder_error", "RuntimeError: a bug")


# --- the run decoder (a run of messages through the fast path in one map) agrees too ---------

_VALID = orjson.dumps(BASE)
_HALF = len(_VALID) // 2


@st.composite
def _joinable(draw) -> bytes | None:
    """Events far ahead, and messages that would fool a decoder of a run's values joined by
    newlines (the run decoder once was one; kept so that no such decoder comes back unnoticed):
    blank ones, ones with newlines in them (a pretty-printed event is valid), two events in one,
    an event cut in two across messages, or anything of the other strategies."""
    kinds = ["valid", "valid", "future", "blank", "newline", "two", "cut", "other"]
    kind = draw(st.sampled_from(kinds))
    if kind == "valid":
        return _event(event_id=f"e{draw(st.integers(0, 9))}")
    if kind == "future":  # up to 3 h on: some too far ahead of the watermark (1 h here)
        return _event(event_time=BASE["event_time"] + draw(st.integers(0, 3 * 3_600_000)))
    if kind == "blank":
        return draw(st.sampled_from([b"", b" ", b"\t", b"\r", b"\n", b" \r\n "]))
    if kind == "newline":
        return json.dumps(BASE, indent=draw(st.sampled_from([None, 1]))).encode() + b"\n"
    if kind == "two":
        return _VALID + draw(st.sampled_from([b"", b" ", b"\n", b"\r"])) + _VALID
    if kind == "cut":  # halves of an event, or of one event with a string that spans them
        if draw(st.booleans()):
            return draw(st.sampled_from([_VALID[:_HALF], _VALID[_HALF:]]))
        return draw(
            st.sampled_from([b'{"event_id":"a},{"', b'","event_time":1404172800000}', _VALID])
        )
    return draw(st.one_of(_messages(), _hostile()))


@pytest.mark.parametrize("run", [2, 3, 8])
@settings(max_examples=150, deadline=None)
@given(st.lists(_joinable(), min_size=1, max_size=40))
def test_the_one_call_decoder_agrees_with_the_exact_classifier(run, values):
    """Runs of ``run`` messages go through the fast path together first, message by message
    only if it refuses one (the worker's runs are longer; made short here so that runs with and
    without bad messages both occur)."""
    import pipelines.events.decode as decode

    default, decode.RUN = decode.RUN, run
    try:
        batch = _decode(values)
    finally:
        decode.RUN = default
    _assert_agrees_with_the_reference(values, batch)
    # as a reader's records carry them: a dead letter is sent as JSON, numpy ints are not
    assert all(type(d.offset) is type(d.timestamp) is int for d in batch.dead_letters)
    assert type(batch.watermark) is int
