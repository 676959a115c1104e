"""What every decoder shares: the records a reader hands a task, the decoded batch, dead letters
and their reasons, and the steps that need no schema.

A decoder (:mod:`pipelines.events.declared` for JSON, :mod:`pipelines.events.avro`) turns a
:class:`RecordBatch` of one partition into a :class:`DecodedBatch`: the valid events as columns
and each bad message as a :class:`DeadLetter` with a reason code; none raises, whatever the
bytes. :func:`parse_object` makes the checks that need no schema (empty, oversize, too deep,
malformed, not an object) in the order every decoder applies them; a message nested deeper
than :data:`MAX_JSON_DEPTH` is ``too_deep`` before any parser recurses into it.

The task's watermark (the largest accepted event time) advances event by event, and the
watermark *before* each event is kept (:func:`watermarks_before`), so lateness decisions depend
only on the order of the partition, never on how polls happened to cut it into batches.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson

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
    "NULLED",
    "OUT_OF_RANGE",
    "OVERSIZE",
    "TOO_DEEP",
    "UNKNOWN_SCHEMA",
    "WRONG_TYPE",
    "DeadLetter",
    "DecodedBatch",
    "RawRecord",
    "RecordBatch",
    "dead_letter",
    "json_depth",
    "parse_object",
    "watermarks_before",
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
    field: str | None = None
    """The declared field whose value did not fit (``missing_field``, ``wrong_type``,
    ``out_of_range``; the event time's column name for the event time); None for the rest."""


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
    nulled: dict[tuple[str, str], int] = field(default_factory=dict)
    """Values made null under ``on_type_error: null``, per (field, reason) (``wrong_type``,
    ``out_of_range``), over this batch's events (not its dead letters)."""
    nulled_at: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    """The same per event: offset -> its (field, reason) made null (only events with one)."""

    def __len__(self) -> int:
        return len(self.offsets)

    def only(self, offsets: np.ndarray) -> DecodedBatch:
        """The batch cut down to the records at ``offsets`` (ascending): their events, dead
        letters and nulled values, ``consumed`` counting them. Each event keeps the watermark
        before it and the batch its watermark after it: those of every record decoded (a key
        bucket's siblings' included), so lateness follows the whole partition."""
        keep = np.isin(self.offsets, offsets, assume_unique=True)
        ours = set(offsets.tolist())
        nulled: dict[tuple[str, str], int] = {}
        if self.nulled and not self.nulled_at:
            raise ValueError("a batch with nulled values must say which events had them")
        for offset, pairs in self.nulled_at.items():
            if offset in ours:
                for pair in pairs:
                    nulled[pair] = nulled.get(pair, 0) + 1
        return DecodedBatch(
            offsets=self.offsets[keep],
            kafka_timestamps=self.kafka_timestamps[keep],
            columns={name: column[keep] for name, column in self.columns.items()},
            prior_watermark=self.prior_watermark[keep],
            dead_letters=[d for d in self.dead_letters if d.offset in ours],
            watermark=self.watermark,
            consumed=len(offsets),
            next_offset=self.next_offset,
            nulls={name: mask[keep] for name, mask in self.nulls.items() if mask[keep].any()},
            nulled=nulled,
            nulled_at={o: p for o, p in self.nulled_at.items() if o in ours},
        )


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


RUN = 32
"""Messages decoded by one ``map`` over the fast path. A run with a bad message is decoded
again message by message, so the longer the run, the more a rare bad message costs; 32 did
best on the generator's share of bad messages (docs/benchmarks.md)."""


MAX_AHEAD_VECTORIZED = 32
"""Past this many events too far ahead in one batch, the watermark is followed event by event."""


def watermarks_before(
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


def dead_letter(records: RecordBatch, i: int, why: tuple[str, ...]) -> DeadLetter:
    """Record ``i`` dead-lettered for ``why``: (reason, detail) or (reason, detail, field)."""
    reason, detail = why[0], why[1]
    value = records.values[i]
    kept = value[:1024] if reason == OVERSIZE else value  # type: ignore[index]
    field_name = why[2] if len(why) > 2 else None
    return DeadLetter(records.offsets[i], records.timestamps[i], reason, detail, kept, field_name)


NULLED = "\x00nulled"
"""The key under which a decoder's exact reading lists the (field, reason) of each value it
made null under ``on_type_error: null`` (present only when any; no column can be named so)."""
