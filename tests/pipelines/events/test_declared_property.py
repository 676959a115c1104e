"""The decoder built from a declaration agrees with a plain reference (the standard ``json``
module plus the declaration, as docs/decoding.md describes it), for random declarations and
any messages: each is decoded identically or dead-lettered with the same reason; nothing
raises."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.events.declaration import TopicDeclaration, parse_path
from pipelines.events.declared import decoder_for

T_MIN, T_MAX = 946_684_800_000, 4_102_444_800_000
MAX_BYTES = 2048
FUTURE = 3_600_000
NO_WM = -(2**62)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PATTERN, ZONE = "%d/%m/%Y %H:%M:%S", "Europe/Paris"

# --- the reference -------------------------------------------------------------------------


class Refused(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _int(text: str):
    value = int(text)
    if -(2**63) <= value <= 2**64 - 1:
        return value
    return _float(text)  # as orjson: an integer past 64 bits is a double


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("infinite")
    return value


def _no_constant(text: str):
    raise ValueError(text)


def _no_surrogates(x) -> None:
    if isinstance(x, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in x):
        raise ValueError("surrogate")
    if isinstance(x, dict):
        for k, v in x.items():
            _no_surrogates(k)
            _no_surrogates(v)
    if isinstance(x, list):
        for v in x:
            _no_surrogates(v)


def _depth(value: bytes) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for byte in value:
        ch = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]":
            depth -= 1
    return deepest


_ISO = re.compile(
    r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(?:[Zz]|([+-]\d\d):?(\d\d))",
    re.ASCII,
)


def _time(value, fmt: str):
    """The value as epoch ms, or None."""
    if fmt in ("epoch_ms", "epoch_us", "epoch_ns"):
        if type(value) is not int:
            return None
        return value // {"epoch_ms": 1, "epoch_us": 1000, "epoch_ns": 1_000_000}[fmt]
    if fmt == "epoch_s":
        if type(value) is int:
            return value * 1000
        if type(value) is not float or abs(value) * 1000 == float("inf"):
            return None  # a double too large to be milliseconds reads as no time at all
        return round(value * 1000)
    if type(value) is not str:
        return None
    try:
        if fmt == "iso8601":
            m = _ISO.fullmatch(value)
            if m is None:
                return None
            date, clock, fraction, oh, om = m.groups()
            zone = "+00:00" if oh is None else f"{oh}:{om}"
            text = f"{date}T{clock}" + (f".{(fraction + '00000')[:6]}" if fraction else "") + zone
            return (datetime.fromisoformat(text) - EPOCH) // timedelta(milliseconds=1)
        parsed = datetime.strptime(value, PATTERN).replace(tzinfo=ZoneInfo(ZONE))
        return (parsed - EPOCH) // timedelta(milliseconds=1)
    except (ValueError, OverflowError):
        return None


def _fits(value, kind: str, fmt: str, nullable: bool) -> bool:
    if kind == "string":
        return type(value) is str and (nullable or value != "")
    if kind == "long":
        return type(value) is int
    if kind == "double":
        return type(value) in (int, float)
    if kind == "boolean":
        return type(value) is bool
    return _time(value, fmt) is not None


def _in_range(value, kind: str, fmt: str, minimum) -> bool:
    if kind == "long":
        return (-(2**63) if minimum is None else minimum) <= value <= 2**63 - 1
    if kind == "double":
        return minimum is None or value >= minimum
    if kind == "timestamp":
        return T_MIN <= _time(value, fmt) < T_MAX
    return True


ABSENT, BAD = object(), object()


def _at(event, steps, nullable):
    for step in steps:
        if event is None:
            return None if nullable else BAD
        if isinstance(step, int):
            if type(event) is not list:
                return BAD
            if step >= len(event):
                return ABSENT
        elif type(event) is not dict:
            return BAD
        elif step not in event:
            return ABSENT
        event = event[step]
    return event


def reference(d: TopicDeclaration, value: bytes | None, stamp: int):
    """(reason,) or the message's columns."""
    if value is None:
        return ("empty",)
    if len(value) > MAX_BYTES:
        return ("oversize",)
    if _depth(value) > 64:
        return ("too_deep",)
    try:
        event = json.loads(
            value.decode("utf-8"),
            parse_int=_int,
            parse_float=_float,
            parse_constant=_no_constant,
        )
        _no_surrogates(event)
    except ValueError:
        return ("malformed_json",)
    if type(event) is not dict:
        return ("not_an_object",)
    soft = d.on_type_error == "null"
    readings = []  # (column, steps, type, format, nullable, minimum, soft)
    for f in d.fields:
        readings.append(
            (f.name, f.steps, f.type.value, (f.format or "epoch_ms"), f.nullable, f.minimum, soft)
        )
    if d.event_time.source == "field":
        t = ("event_time", d.event_time.steps, "timestamp", d.event_time.format.value, False)
        readings.append((*t, None, False))
    order = sorted(
        readings, key=lambda r: (r[0] != d.id, r[0] != "event_time")
    )  # the id, the time, the rest as declared
    found = {r[0]: _at(event, r[1], r[4]) for r in order}
    for r in order:
        if found[r[0]] is ABSENT and not r[4]:
            return ("missing_field",)
    out = {}
    for name, _, kind, fmt, nullable, _, soft in order:
        v = found[name]
        if v is ABSENT:
            v = None
        if (
            v is BAD
            or (v is None and not nullable)
            or (v is not None and not _fits(v, kind, fmt, nullable))
        ):
            if not soft:
                return ("wrong_type",)
            v = None
        out[name] = v
    ranges = [r for r in order if r[0] != "event_time"] + [r for r in order if r[0] == "event_time"]
    for name, _, kind, fmt, _, minimum, soft in ranges:
        if out[name] is not None and not _in_range(out[name], kind, fmt, minimum):
            if not soft:
                return ("out_of_range",)
            out[name] = None
    for name, _, kind, fmt, *_ in order:
        if out[name] is not None and kind == "timestamp":
            out[name] = _time(out[name], fmt)
        elif out[name] is not None and kind == "double":
            out[name] = float(out[name])
    if d.event_time.source == "record":
        if not T_MIN <= stamp < T_MAX:
            return ("out_of_range",)
        out["event_time"] = stamp
    return out


# --- declarations and messages ---------------------------------------------------------------

_names = st.sampled_from(["a", "b", "c", "id", "amount", "card", "n", "ok"])
_paths = st.one_of(
    st.none(),
    st.sampled_from(["card.country", "card.type", "meta.x.y", "items[0]", "items[1].sku", "a"]),
)
_formats = st.sampled_from(["epoch_s", "epoch_ms", "epoch_us", "epoch_ns", "iso8601"])


@st.composite
def declarations(draw) -> TopicDeclaration:
    names = draw(st.lists(_names, min_size=1, max_size=5, unique=True))
    fields = []
    for name in names:
        kind = draw(st.sampled_from(["string", "long", "double", "boolean", "timestamp"]))
        field = {"name": name, "type": kind, "path": draw(_paths), "nullable": draw(st.booleans())}
        if kind == "timestamp":
            field["format"] = draw(_formats)
        if kind in ("long", "double") and draw(st.booleans()):
            field["minimum"] = draw(st.sampled_from([0, -5, 10, 2.5]))
        fields.append(field)
    source = draw(st.sampled_from(["field", "field", "record"]))
    if source == "record":
        event_time = {"source": "record"}
    else:
        fmt = draw(
            st.sampled_from(["epoch_s", "epoch_ms", "epoch_us", "epoch_ns", "iso8601", "pattern"])
        )
        event_time = {
            "path": draw(st.sampled_from(["ts", "meta.ts", "event_time", "card.type"])),
            "format": fmt,
        }
        if fmt == "pattern":
            event_time |= {"pattern": PATTERN, "zone": ZONE}
    record = draw(st.sampled_from([{}, {"key": "k"}, {"offset": "o", "partition": "p"}]))
    return TopicDeclaration(
        topic="t",
        fields=fields,
        event_time=event_time,
        id=draw(st.sampled_from([None, names[0]])),
        record=record,
        on_type_error=draw(st.sampled_from(["dead_letter", "null"])),
    )


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(
        ["", "2014-07-01T08:00:00Z", "01/07/2014 10:00:00", "2014-07-01 08:00:00.5+0200"]
    ),
)


def _value(draw, kind: str, fmt: str):
    if kind == "string":
        return draw(st.text(max_size=6))  # "" for a required string: wrong_type
    if kind == "long":
        return draw(st.one_of(st.integers(-10, 10**6), st.sampled_from([2**63 - 1, -(2**63)])))
    if kind == "double":
        return draw(st.one_of(st.floats(-1e6, 1e6), st.integers(-10, 10)))
    if kind == "boolean":
        return draw(st.booleans())
    ms = draw(st.integers(T_MIN - 10**9, T_MAX + 10**9))
    if fmt == "epoch_ms":
        return ms
    if fmt == "epoch_s":
        return draw(st.sampled_from([ms // 1000, ms / 1000]))
    if fmt == "epoch_us":
        return ms * 1000 + draw(st.integers(0, 999))
    if fmt == "epoch_ns":
        return ms * 1_000_000 + draw(st.integers(0, 999_999))
    moment = EPOCH + timedelta(milliseconds=ms)
    if fmt == "pattern":
        return moment.astimezone(ZoneInfo(ZONE)).strftime(PATTERN)
    offset = timedelta(minutes=draw(st.sampled_from([0, 120, -330])))
    local = moment.astimezone(__import__("datetime").timezone(offset))
    text = local.isoformat(
        timespec=draw(st.sampled_from(["seconds", "milliseconds", "microseconds"]))
    )
    return text.replace("+00:00", draw(st.sampled_from(["Z", "+00:00", "z"])))


def _place(event: dict, steps, value) -> None:
    here = event
    for k, step in enumerate(steps[:-1]):
        nxt = steps[k + 1]
        if isinstance(step, int):
            if type(here) is not list:
                return
            while len(here) <= step:
                here.append({} if not isinstance(nxt, int) else [])
            here = here[step]
        else:
            if type(here) is not dict:
                return
            if step not in here or type(here[step]) not in (dict, list):
                here[step] = [] if isinstance(nxt, int) else {}
            here = here[step]
    last = steps[-1]
    if isinstance(last, int):
        if type(here) is list:
            while len(here) <= last:
                here.append(None)
            here[last] = value
    elif type(here) is dict:
        here[last] = value


@st.composite
def messages(draw, d: TopicDeclaration) -> bytes | None:
    kind = draw(st.sampled_from(["valid", "valid", "valid", "mutated", "mutated", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.one_of(st.none(), st.binary(max_size=30)))
    if kind == "json":
        return json.dumps(
            draw(
                st.recursive(
                    _scalars,
                    lambda c: (
                        st.lists(c, max_size=3)
                        | st.dictionaries(st.text(max_size=3), c, max_size=3)
                    ),
                    max_leaves=8,
                )
            )
        ).encode()
    event: dict = {}
    readings = [(f.steps, f.type.value, f.format or "epoch_ms", f.nullable) for f in d.fields]
    if d.event_time.source == "field":
        readings.append((d.event_time.steps, "timestamp", d.event_time.format.value, False))
    for steps, kind_, fmt, nullable in readings:
        value = None if nullable and draw(st.integers(0, 3)) == 0 else _value(draw, kind_, fmt)
        if value is None and draw(st.booleans()):
            continue  # absent rather than null
        _place(event, steps, value)
    if kind == "mutated":
        for _ in range(draw(st.integers(1, 2))):
            steps = draw(st.sampled_from([r[0] for r in readings]))
            if draw(st.booleans()):
                _place(event, steps, draw(_scalars))
            elif len(steps) == 1 and steps[0] in event:
                del event[steps[0]]
            else:
                _place(event, steps[:1], draw(_scalars))
    if draw(st.integers(0, 4)) == 0:
        event["extra"] = draw(st.sampled_from([1, {"x": [1]}, "y", [[[]]]]))
    if draw(st.integers(0, 10)) == 0:
        event["deep"] = json.loads("[" * 70 + "]" * 70)
    return json.dumps(event).encode()


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes | None
    key: bytes | None


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_the_decoder_agrees_with_the_reference(data):
    d = data.draw(declarations())
    values = data.draw(st.lists(messages(d), min_size=1, max_size=12))
    stamps = data.draw(
        st.lists(
            st.sampled_from([0, 1_404_172_800_000, 1_404_172_900_000]),
            min_size=len(values),
            max_size=len(values),
        )
    )
    records = [
        Rec(i, stamps[i], v, data.draw(st.sampled_from([None, b"k1", b"\xff"])))
        for i, v in enumerate(values)
    ]
    batch = decoder_for(d)(
        records, NO_WM, max_message_bytes=MAX_BYTES, max_future_ms=FUTURE, partition=7
    )

    accepted, dead, wm = [], [], NO_WM
    for r in records:
        got = reference(d, r.value, r.timestamp)
        if type(got) is tuple:
            dead.append((r.offset, got[0]))
            continue
        t = got["event_time"]
        if wm != NO_WM and t > wm + FUTURE:
            dead.append((r.offset, "future_event_time"))
            continue
        if d.record.key:
            got[d.record.key] = None if r.key is None else r.key.decode("utf-8", "replace")
        if d.record.offset:
            got[d.record.offset] = r.offset
        if d.record.partition:
            got[d.record.partition] = 7
        accepted.append((r.offset, wm, got))
        wm = max(wm, t)

    rows = []
    for i, (offset, prior) in enumerate(zip(batch.offsets, batch.prior_watermark, strict=True)):
        row = {}
        for name, column in batch.columns.items():
            null = name in batch.nulls and batch.nulls[name][i]
            row[name] = (
                None if null else column[i].item() if hasattr(column[i], "item") else column[i]
            )
        rows.append((int(offset), int(prior), row))
    assert [(d_.offset, d_.reason) for d_ in batch.dead_letters] == dead
    assert rows == accepted
    assert batch.watermark == wm and batch.consumed == len(values)


def test_the_reference_reads_paths_as_the_declaration_parses_them():
    assert parse_path("items[1].sku") == ("items", 1, "sku")
    assert orjson.loads(b"18446744073709551616") == _int("18446744073709551616")


def test_a_double_too_large_for_milliseconds_is_a_wrong_type_time_for_both() -> None:
    """Found by the property test: the reference raised on 1.8e305 seconds."""
    d = TopicDeclaration.model_validate(
        {
            "topic": "t",
            "event_time": {"format": "epoch_s"},
            "fields": [{"name": "a", "type": "long"}],
        }
    )
    value = b'{"event_time": 1.8e305, "a": 1}'
    batch = decoder_for(d)(
        [Rec(0, 0, value, None)],
        NO_WM,
        max_message_bytes=MAX_BYTES,
        max_future_ms=FUTURE,
        partition=0,
    )
    assert reference(d, value, 0) == ("wrong_type",)
    assert [letter.reason for letter in batch.dead_letters] == ["wrong_type"]
