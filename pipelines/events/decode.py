"""Decode and validate a batch of raw messages into columns, in partition order.

Decoding is the only per-message Python work on the hot path. A valid message is parsed and
type-checked in one C call (msgspec, against :class:`_Event`); only a message that fails it
takes the slow path (:func:`_classify`), which says exactly why it is bad, so the reasons
and details of dead letters do not depend on the fast path. Each bad message becomes a
:class:`DeadLetter` with a reason code; none raises, whatever the bytes.

No decoder recurses into deep nesting (msgspec raises RecursionError a few thousand levels
down, which escaped as a crash). The fast path's schema forbids fields beyond the event's and
types every field as a scalar, so msgspec refuses anything nested at its first token. A message
it refuses for an extra field gets a second look: decoded leniently if it has no more than
``MAX_JSON_DEPTH`` opening brackets (two byte counts), else classified; the classifier measures
the exact depth outside strings before parsing, so a deep message is dead-lettered as
``too_deep`` and a flat one with brackets in its strings is decoded as usual. Events are flat
objects: 64 levels leave room for any extra field a producer adds.

The task's watermark (the largest accepted event time) advances message by message inside
the loop, and the watermark *before* each event is kept, so lateness decisions depend only on
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
    "MALFORMED_JSON",
    "MAX_JSON_DEPTH",
    "MISSING_FIELD",
    "NOT_AN_OBJECT",
    "NO_WATERMARK",
    "OUT_OF_RANGE",
    "OVERSIZE",
    "TOO_DEEP",
    "WRONG_TYPE",
    "DeadLetter",
    "DecodedBatch",
    "RawRecord",
    "RecordBatch",
    "decode_batch",
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
    CRASHED_TASK,
)
"""Every reason a :class:`DeadLetter` can carry."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays a message may have (an event is one level)."""

BYTES_TX_MAX = 2**63 - 1
"""bytes_tx is stored as int64: a larger count (msgspec reads integers of any size) is out of
range rather than an overflow when the columns are built."""


class RawRecord(Protocol):
    """What the decoder needs of a Kafka record (kafka-python's ConsumerRecord has it)."""

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

    @classmethod
    def of(cls, records: Sequence[RawRecord]) -> RecordBatch:
        return cls(
            [r.offset for r in records],
            [r.timestamp for r in records],
            [r.value for r in records],
            [getattr(r, "key", None) for r in records],
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


def _check(value: bytes | None, max_message_bytes: int) -> tuple[str, str] | _Event:
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
    decode = _decode_event
    events: list[_Event] = []
    offsets: list[int] = []
    stamps: list[int] = []
    prior: list[int] = []
    dead: list[DeadLetter] = []
    wm = watermark
    for offset, stamp, value in zip(
        records.offsets, records.timestamps, records.values, strict=True
    ):
        try:
            if len(value) > max_message_bytes:  # None raises TypeError: the slow path says why
                raise TypeError
            event = decode(value)  # types and ranges checked in C; nothing nested is parsed
        except Exception:  # whatever the fast path refuses gets a second look, never raises
            checked = _second_look(value, max_message_bytes)
            if type(checked) is tuple:
                reason, detail = checked
                kept = value[:1024] if reason == OVERSIZE else value
                dead.append(DeadLetter(offset, stamp, reason, detail, kept))
                continue
            event = checked
        t = event.event_time
        if wm != NO_WATERMARK and t > wm + max_future_ms:
            detail = f"event_time {t} is {(t - wm) / 1000:.0f}s ahead of the watermark {wm}"
            dead.append(DeadLetter(offset, stamp, FUTURE_EVENT_TIME, detail, value))
            continue
        events.append(event)
        offsets.append(offset)
        stamps.append(stamp)
        prior.append(wm)
        if t > wm:
            wm = t
    columns = {
        name: np.array(
            list(map(attrgetter(name), events)),
            dtype=np.int64 if EVENT_FIELDS[name].numeric else object,
        )
        for name in _FIELDS
    }
    return DecodedBatch(
        offsets=np.array(offsets, dtype=np.int64),
        kafka_timestamps=np.array(stamps, dtype=np.int64),
        columns=columns,
        prior_watermark=np.array(prior, dtype=np.int64),
        dead_letters=dead,
        watermark=wm,
        consumed=len(records),
        next_offset=records.offsets[-1] + 1 if len(records) else -1,
    )
