"""The hand-written decoder of the generator's events, kept beside the one built from their
declaration (``data/topics.yaml``) as its baseline: the benchmarks measure the declared decoder
against it (``benchmarks/ingest.py --decoder-only``) and a test holds the two to the same
columns, watermarks and dead letters.

A run of :data:`~pipelines.events.decode.RUN` messages is parsed and type-checked by msgspec
against :class:`_Event` in one ``map`` (no Python step per message); a run with a message it
refuses is decoded message by message, and only a message the fast path refuses takes the slow
path (:func:`_classify`), which says exactly why it is bad. The fast path's schema forbids
fields beyond the event's and types every field as a scalar, so msgspec refuses anything nested
at its first token; a message refused for an extra field gets a second look (decoded leniently
if it has no more than ``MAX_JSON_DEPTH`` opening brackets, else classified).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import numpy as np

from pipelines.events import decode as shared
from pipelines.events.declaration import EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS
from pipelines.events.decode import (
    DECODER_ERROR,
    FUTURE_EVENT_TIME,
    MAX_JSON_DEPTH,
    MISSING_FIELD,
    NO_WATERMARK,
    OUT_OF_RANGE,
    OVERSIZE,
    WRONG_TYPE,
    DeadLetter,
    DecodedBatch,
    RawRecord,
    RecordBatch,
    dead_letter,
    parse_object,
    watermarks_before,
)
from pipelines.generator.events import EVENT_FIELDS

__all__ = ["BYTES_TX_MAX", "decode_batch"]

BYTES_TX_MAX = 2**63 - 1
"""bytes_tx is stored as int64: a larger count (msgspec reads integers of any size) is out of
range rather than an overflow when the columns are built."""


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
    for lo in range(0, len(values), shared.RUN):
        run = values[lo : lo + shared.RUN]
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
        accepted = watermarks_before(times, watermark, max_future_ms)
        if accepted is not None:
            prior, ahead = accepted
            offsets = np.array(records.offsets, dtype=np.int64)
            stamps = np.array(records.timestamps, dtype=np.int64)
            dead = [dead_letter(records, i, checked[i]) for i in refused]  # type: ignore[arg-type]
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
