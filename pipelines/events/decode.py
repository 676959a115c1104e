"""Decode and validate a batch of raw messages into columns, in partition order.

A run of :data:`RUN` messages is parsed and type-checked by msgspec against :class:`_Event`
in one ``map`` (no Python step per message); a run with a message it refuses is decoded
message by message, and only a message the fast path refuses takes the slow path
(:func:`_classify`), which says exactly why it is bad, so the reasons and details of dead
letters do not depend on the fast path. Each bad message becomes a :class:`DeadLetter` with a
reason code; none raises, whatever the bytes.

No decoder recurses into deep nesting (msgspec raises RecursionError a few thousand levels
down, which escaped as a crash). The fast path's schema forbids fields beyond the event's and
types every field as a scalar, so msgspec refuses anything nested at its first token. A message
it refuses for an extra field gets a second look: decoded leniently if it has no more than
``MAX_JSON_DEPTH`` opening brackets (two byte counts), else classified; the classifier measures
the exact depth outside strings before parsing, so a deep message is dead-lettered as
``too_deep`` and a flat one with brackets in its strings is decoded as usual. Events are flat
objects: 64 levels leave room for any extra field a producer adds.

The task's watermark (the largest accepted event time) advances event by event (a running
maximum in numpy, restarted after each event too far ahead of it), and the watermark *before*
each event is kept, so lateness decisions depend only on
the order of the partition, never on how polls happened to cut it into batches.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Annotated, Any, Protocol

import msgspec
import numpy as np
import orjson

from pipelines.events.schema import EVENT_FIELDS, EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS

__all__ = [
    "CRASHED_TASK",
    "DEAD_LETTER_REASONS",
    "DECODER_ERROR",
    "EMPTY",
    "FUTURE_EVENT_TIME",
    "MALFORMED_AVRO",
    "MALFORMED_JSON",
    "MAX_JSON_DEPTH",
    "MISSING_FIELD",
    "NOT_AN_OBJECT",
    "NO_WATERMARK",
    "OUT_OF_RANGE",
    "OVERSIZE",
    "TOO_DEEP",
    "UNKNOWN_SCHEMA",
    "WRONG_TYPE",
    "DeadLetter",
    "DecodedBatch",
    "RawRecord",
    "RecordBatch",
    "decode_batch",
    "parse_object",
]

NO_WATERMARK = -(2**62)
"""Watermark of a task that has accepted no event yet."""

# Dead-letter reasons, in the order the decoder tests for them.
EMPTY = "empty"
OVERSIZE = "oversize"
TOO_DEEP = "too_deep"
MALFORMED_JSON = "malformed_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
OUT_OF_RANGE = "out_of_range"
FUTURE_EVENT_TIME = "future_event_time"
DECODER_ERROR = "decoder_error"
"""The classifier itself failed (a bug, never expected): the detail is the exception."""
MALFORMED_AVRO = "malformed_avro"
"""An Avro topic's message not in its framing, or whose body does not read with its schema."""
UNKNOWN_SCHEMA = "unknown_schema"
"""An Avro message whose schema id the schema registry does not know."""
CRASHED_TASK = "crashed_task"
"""Not the decoder's: a record on which a task crashed twice, quarantined
(:mod:`pipelines.stream.quarantine`)."""
DEAD_LETTER_REASONS = (
    EMPTY,
    OVERSIZE,
    TOO_DEEP,
    MALFORMED_JSON,
    NOT_AN_OBJECT,
    MISSING_FIELD,
    WRONG_TYPE,
    OUT_OF_RANGE,
    FUTURE_EVENT_TIME,
    DECODER_ERROR,
    MALFORMED_AVRO,
    UNKNOWN_SCHEMA,
    CRASHED_TASK,
)
"""Every reason a :class:`DeadLetter` can carry."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays a message may have (an event is one level)."""

BYTES_TX_MAX = 2**63 - 1
"""bytes_tx is stored as int64: a larger count (msgspec reads integers of any size) is out of
range rather than an overflow when the columns are built."""


class RawRecord(Protocol):
    """What the decoder needs of a Kafka record (kafka-python's ConsumerRecord has it, and
    its ``key`` and ``headers``, which a declaration's record columns read)."""

    offset: int
    timestamp: int
    value: bytes | None


@dataclass(slots=True)
class RecordBatch:
    """Records of one partition as columns, ascending offsets: what a reader hands a task.

    Columns, not record objects, because building an object per message cost the reader as
    much as decoding it.
    """

    offsets: list[int]
    timestamps: list[int]
    values: list[bytes | None]
    keys: list[bytes | None]
    headers: list[Sequence[tuple[str, bytes | None]] | None] | None = None
    """Each record's headers as (name, value) pairs (None or empty: it has none); None for
    the whole batch where they were not read (a hand-built batch)."""

    @classmethod
    def of(cls, records: Sequence[RawRecord]) -> RecordBatch:
        """The records' columns; a record without ``key`` or ``headers`` attributes has none
        (kafka-python's ConsumerRecord has both)."""
        return cls(
            [r.offset for r in records],
            [r.timestamp for r in records],
            [r.value for r in records],
            [getattr(r, "key", None) for r in records],
            [getattr(r, "headers", None) for r in records],
        )

    def slice(self, lo: int, hi: int) -> RecordBatch:
        """Records ``lo`` to ``hi`` (exclusive), every column kept."""
        headers = self.headers
        return RecordBatch(
            self.offsets[lo:hi],
            self.timestamps[lo:hi],
            self.values[lo:hi],
            self.keys[lo:hi],
            None if headers is None else headers[lo:hi],
        )

    def take(self, index: Sequence[int]) -> RecordBatch:
        """The records at ``index`` (ascending), every column kept."""
        headers = self.headers
        return RecordBatch(
            [self.offsets[i] for i in index],
            [self.timestamps[i] for i in index],
            [self.values[i] for i in index],
            [self.keys[i] for i in index],
            None if headers is None else [headers[i] for i in index],
        )

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class DeadLetter:
    """A message that could not be used, with why; it goes to the dead-letter topic."""

    offset: int
    timestamp: int
    reason: str
    detail: str
    value: bytes | None


@dataclass
class DecodedBatch:
    """Valid events of one batch as columns, plus the dead letters, in offset order."""

    offsets: np.ndarray
    kafka_timestamps: np.ndarray
    columns: dict[str, np.ndarray]
    prior_watermark: np.ndarray
    dead_letters: list[DeadLetter] = field(default_factory=list)
    watermark: int = NO_WATERMARK
    consumed: int = 0
    next_offset: int = -1
    codes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Factorized grouping columns, shared by the views that group by them."""
    nulls: dict[str, np.ndarray] = field(default_factory=dict)
    """Per non-string column with a null in this batch, a mask (True: null; the column holds
    0 there). String columns hold None. Only a declared topic's nullable fields (and fields
    under ``on_type_error: null``) have nulls (:mod:`pipelines.events.declared`)."""

    def __len__(self) -> int:
        return len(self.offsets)


_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


_EventTime = Annotated[int, msgspec.Meta(ge=EVENT_TIME_MIN_MS, lt=EVENT_TIME_MAX_MS)]
_ByteCount = Annotated[int, msgspec.Meta(ge=0, le=BYTES_TX_MAX)]


class _Event(msgspec.Struct, gc=False):
    """The schema of the lenient decoder: the fields of EVENT_FIELDS with their strict types
    and ranges (fields beyond them are skipped)."""

    event_id: _NonEmpty
    event_time: _EventTime
    org: _NonEmpty
    client: _NonEmpty
    bytes_tx: _ByteCount
    session_id: _NonEmpty
    event_type: _NonEmpty


class _ExactEvent(_Event, forbid_unknown_fields=True, gc=False):
    """The fast path's: no other field, so nothing nested is ever parsed (no recursion)."""


assert set(_Event.__struct_fields__) == set(EVENT_FIELDS), "decoder out of step with the schema"
_FIELDS = _Event.__struct_fields__
_decode_event = msgspec.json.Decoder(_ExactEvent).decode
_decode_lenient = msgspec.json.Decoder(_Event).decode
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("{"), ord("[")]] = 1
_OPEN[[ord("}"), ord("]")]] = -1


def json_depth(value: bytes) -> int:
    """The deepest nesting of objects and arrays in ``value``, brackets in strings ignored
    (for malformed JSON, of its brackets outside well-formed strings)."""
    bare = _STRINGS.sub(b"", value)
    if not bare:
        return 0
    steps = _OPEN[np.frombuffer(bare, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _type_problem(event: dict[str, Any]) -> str | None:
    for name, spec in EVENT_FIELDS.items():
        value = event[name]
        if spec.numeric:
            if type(value) is not int:
                return f"{name} must be an integer, got {type(value).__name__} {value!r:.40}"
        elif type(value) is not str or not value:
            return f"{name} must be a non-empty string, got {type(value).__name__} {value!r:.40}"
    return None


def _second_look(value: bytes | None, max_message_bytes: int) -> tuple[str, str] | _Event:
    """A message the fast path refused: an event with fields beyond the schema (and not too
    deep to decode) is decoded leniently; anything else is classified."""
    try:
        if (
            len(value) <= max_message_bytes  # type: ignore[arg-type]  # None: classified
            and value.count(b"{") + value.count(b"[") <= MAX_JSON_DEPTH  # type: ignore[union-attr]
        ):
            return _decode_lenient(value)  # type: ignore[arg-type]
    except Exception:  # not an event with extra fields: the classifier says what it is
        pass
    return _classify(value, max_message_bytes)


def _classify(value: bytes | None, max_message_bytes: int) -> tuple[str, str] | _Event:
    """The slow path: why a message is bad as (reason, detail), or the event if it is not.

    Everything but lateness relative to the watermark is decided here, in this order. It never
    raises: an unexpected failure is a ``decoder_error`` with the exception's text.
    """
    try:
        return _check(value, max_message_bytes)
    except Exception as exc:  # a bug, not the input's fault: the message is still accounted for
        return DECODER_ERROR, f"{type(exc).__name__}: {exc}"[:500]


def parse_object(value: bytes | None, max_message_bytes: int) -> tuple[str, str] | dict[str, Any]:
    """A message's JSON object, or why it is none: the checks that need no schema, in the
    order every classifier applies them (empty, oversize, too deep, malformed, not an
    object)."""
    if value is None:
        return EMPTY, "message has no value"
    if len(value) > max_message_bytes:
        return OVERSIZE, f"{len(value)} bytes > max_message_bytes {max_message_bytes}"
    if value.count(b"{") + value.count(b"[") > MAX_JSON_DEPTH:  # else it cannot be too deep
        depth = json_depth(value)
        if depth > MAX_JSON_DEPTH:
            return TOO_DEEP, f"nested {depth} levels deep > {MAX_JSON_DEPTH}"
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return MALFORMED_JSON, str(exc)
    if type(event) is not dict:
        return NOT_AN_OBJECT, f"expected a JSON object, got {type(event).__name__}"
    return event


def _check(value: bytes | None, max_message_bytes: int) -> tuple[str, str] | _Event:
    event = parse_object(value, max_message_bytes)
    if type(event) is tuple:
        return event
    for name in EVENT_FIELDS:
        if name not in event:
            return MISSING_FIELD, f"missing field {name!r}"
    problem = _type_problem(event)
    if problem is not None:
        return WRONG_TYPE, problem
    t, nbytes = event["event_time"], event["bytes_tx"]
    if nbytes < 0:
        return OUT_OF_RANGE, f"bytes_tx {nbytes} < 0"
    if nbytes > BYTES_TX_MAX:
        return OUT_OF_RANGE, f"bytes_tx {str(nbytes)[:40]} > {BYTES_TX_MAX}"
    if not EVENT_TIME_MIN_MS <= t < EVENT_TIME_MAX_MS:
        return OUT_OF_RANGE, f"event_time {t} outside [{EVENT_TIME_MIN_MS}, {EVENT_TIME_MAX_MS})"
    return _Event(**{name: event[name] for name in _FIELDS})


RUN = 32
"""Messages decoded by one ``map`` over the fast path. A run with a bad message is decoded
again message by message, so the longer the run, the more a rare bad message costs; 32 did
best on the generator's share of bad messages (docs/benchmarks.md)."""


def _one(value: bytes | None, max_message_bytes: int) -> tuple[str, str] | _Event:
    """One message by the fast path, else its second look (never raises)."""
    try:
        if len(value) > max_message_bytes:  # type: ignore[arg-type]  # None: the slow path
            raise TypeError
        return _decode_event(value)  # types and ranges checked in C; nothing nested is parsed
    except Exception:  # whatever the fast path refuses gets a second look, never raises
        return _second_look(value, max_message_bytes)


def _decode_values(
    values: Sequence[bytes | None], max_message_bytes: int, out: list[tuple[str, str] | _Event]
) -> list[int]:
    """Append each message's event, or its (reason, detail), to ``out``, in order; the
    indices of those that are not events.

    Each run of :data:`RUN` messages goes through the fast path in one ``map`` (no Python
    step per message: msgspec costs about as much per message called once per message as
    over lines joined, and each message is decoded alone, so no line can hold two); a run
    with any message it refuses is decoded again message by message by :func:`_one`, so
    reasons and details are the classifier's and the result never depends on the runs."""
    decode = _decode_event
    one = _one
    refused: list[int] = []
    for lo in range(0, len(values), RUN):
        run = values[lo : lo + RUN]
        try:
            if max(map(len, run)) <= max_message_bytes:  # type: ignore[arg-type]  # None: below
                out.extend(list(map(decode, run)))  # all or nothing: a refusal raises
                continue
        except Exception:  # refused: the run is decoded message by message
            pass
        for i, value in enumerate(run, start=lo):
            checked = one(value, max_message_bytes)
            if type(checked) is tuple:
                refused.append(i)
            out.append(checked)
    return refused


def _columns(events: list[_Event]) -> dict[str, np.ndarray]:
    """The events as columns, one pass per field (no tuple per event: the collector would
    then scan the whole heap far more often)."""
    return {
        name: np.array(
            list(map(attrgetter(name), events)),
            dtype=np.int64 if EVENT_FIELDS[name].numeric else object,
        )
        for name in _FIELDS
    }


MAX_AHEAD_VECTORIZED = 32
"""Past this many events too far ahead in one batch, the watermark is followed event by event."""


def _accept(
    times: np.ndarray, watermark: int, max_future_ms: int
) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
    """The watermark before each event (of event times ``times``), and the (index, watermark
    before it) of each event too far ahead of it (not accepted: it moves no watermark); None
    past :data:`MAX_AHEAD_VECTORIZED` of those.

    The watermark before an event is the running maximum of the accepted events before it:
    one numpy pass, again from each event too far ahead, which are few."""
    m = len(times)
    prior = np.empty(m, dtype=np.int64)
    ahead: list[tuple[int, int]] = []
    lo, base = 0, watermark
    while lo < m:
        t = times[lo:]
        p = prior[lo:]
        p[0] = base
        np.maximum(np.maximum.accumulate(t[:-1]), base, out=p[1:])
        far = (p != NO_WATERMARK) & (t > p + max_future_ms)
        if not far.any():
            break
        first = int(np.argmax(far))
        base = int(p[first])
        ahead.append((lo + first, base))
        if len(ahead) > MAX_AHEAD_VECTORIZED:
            return None
        lo += first + 1
    return prior, ahead


def _dead_letter(records: RecordBatch, i: int, why: tuple[str, str]) -> DeadLetter:
    reason, detail = why
    value = records.values[i]
    kept = value[:1024] if reason == OVERSIZE else value  # type: ignore[index]
    return DeadLetter(records.offsets[i], records.timestamps[i], reason, detail, kept)


def decode_batch(
    records: RecordBatch | Sequence[RawRecord],
    watermark: int,
    *,
    max_message_bytes: int,
    max_future_ms: int,
) -> DecodedBatch:
    """Decode ``records`` (one partition, ascending offsets) starting from ``watermark``."""
    if not isinstance(records, RecordBatch):
        records = RecordBatch.of(records)
    checked: list[tuple[str, str] | _Event] = []
    refused = _decode_values(records.values, max_message_bytes, checked)
    n = len(checked)
    next_offset = records.offsets[-1] + 1 if n else -1
    events = checked if not refused else [c for c in checked if type(c) is not tuple]
    if events:
        columns = _columns(events)
        times = columns["event_time"]
        accepted = _accept(times, watermark, max_future_ms)
        if accepted is not None:
            prior, ahead = accepted
            offsets = np.array(records.offsets, dtype=np.int64)
            stamps = np.array(records.timestamps, dtype=np.int64)
            dead = [_dead_letter(records, i, checked[i]) for i in refused]  # type: ignore[arg-type]
            if refused or ahead:
                valid = np.ones(n, dtype=bool)
                valid[refused] = False
                at = np.flatnonzero(valid)  # each event's index among the messages
                for k, wm in ahead:  # too far ahead of the watermark before it
                    i = int(at[k])
                    t = int(times[k])
                    detail = f"event_time {t} is {(t - wm) / 1000:.0f}s ahead of the watermark {wm}"
                    offset, stamp, value = (
                        records.offsets[i],
                        records.timestamps[i],
                        records.values[i],
                    )
                    dead.append(DeadLetter(offset, stamp, FUTURE_EVENT_TIME, detail, value))
                    valid[i] = False
                dead.sort(key=attrgetter("offset"))
                offsets, stamps = offsets[valid], stamps[valid]
                if ahead:
                    keep = np.ones(len(events), dtype=bool)
                    keep[[k for k, _ in ahead]] = False
                    columns = {name: column[keep] for name, column in columns.items()}
                    times, prior = columns["event_time"], prior[keep]
            return DecodedBatch(
                offsets=offsets,
                kafka_timestamps=stamps,
                columns=columns,
                prior_watermark=prior,
                dead_letters=dead,
                watermark=max(watermark, int(times.max())) if len(times) else watermark,
                consumed=n,
                next_offset=next_offset,
            )
    events = []
    offsets: list[int] = []
    stamps: list[int] = []
    prior_list: list[int] = []
    dead: list[DeadLetter] = []
    wm = watermark
    for offset, stamp, value, event in zip(
        records.offsets, records.timestamps, records.values, checked, strict=True
    ):
        if type(event) is tuple:
            reason, detail = event
            kept = value[:1024] if reason == OVERSIZE else value  # type: ignore[index]
            dead.append(DeadLetter(offset, stamp, reason, detail, kept))
            continue
        t = event.event_time  # type: ignore[union-attr]
        if wm != NO_WATERMARK and t > wm + max_future_ms:
            detail = f"event_time {t} is {(t - wm) / 1000:.0f}s ahead of the watermark {wm}"
            dead.append(DeadLetter(offset, stamp, FUTURE_EVENT_TIME, detail, value))
            continue
        events.append(event)  # type: ignore[arg-type]
        offsets.append(offset)
        stamps.append(stamp)
        prior_list.append(wm)
        if t > wm:
            wm = t
    return DecodedBatch(
        offsets=np.array(offsets, dtype=np.int64),
        kafka_timestamps=np.array(stamps, dtype=np.int64),
        columns=_columns(events),
        prior_watermark=np.array(prior_list, dtype=np.int64),
        dead_letters=dead,
        watermark=wm,
        consumed=n,
        next_offset=next_offset,
    )
