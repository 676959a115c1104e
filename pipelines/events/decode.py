"""Decode and validate a batch of raw messages into columns, in partition order.

Decoding is the only per-message Python work on the hot path, so it is one tight loop;
everything after it (windowing, aggregation) works on the columns. Each bad message
becomes a :class:`DeadLetter` with a reason code; none raises.

The task's watermark (the largest accepted event time) advances message by message inside
the loop, and the watermark *before* each event is kept, so lateness decisions depend only on
the order of the partition, never on how polls happened to cut it into batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson

from pipelines.events.schema import EVENT_FIELDS, EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS

__all__ = [
    "DEAD_LETTER_REASONS",
    "EMPTY",
    "FUTURE_EVENT_TIME",
    "MALFORMED_JSON",
    "MISSING_FIELD",
    "NOT_AN_OBJECT",
    "NO_WATERMARK",
    "OUT_OF_RANGE",
    "OVERSIZE",
    "WRONG_TYPE",
    "DeadLetter",
    "DecodedBatch",
    "RawRecord",
    "decode_batch",
]

NO_WATERMARK = -(2**62)
"""Watermark of a task that has accepted no event yet."""

# Dead-letter reasons, in the order the decoder tests for them.
EMPTY = "empty"
OVERSIZE = "oversize"
MALFORMED_JSON = "malformed_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
OUT_OF_RANGE = "out_of_range"
FUTURE_EVENT_TIME = "future_event_time"
DEAD_LETTER_REASONS = (
    EMPTY,
    OVERSIZE,
    MALFORMED_JSON,
    NOT_AN_OBJECT,
    MISSING_FIELD,
    WRONG_TYPE,
    OUT_OF_RANGE,
    FUTURE_EVENT_TIME,
)
"""Every reason a :class:`DeadLetter` can carry."""


class RawRecord(Protocol):
    """What the decoder needs of a Kafka record (kafka-python's ConsumerRecord has it)."""

    offset: int
    timestamp: int
    value: bytes | None


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

    def __len__(self) -> int:
        return len(self.offsets)


def _type_problem(event: dict[str, Any]) -> str | None:
    for name, spec in EVENT_FIELDS.items():
        value = event[name]
        if spec.numeric:
            if type(value) is not int:
                return f"{name} must be an integer, got {type(value).__name__} {value!r:.40}"
        elif type(value) is not str or not value:
            return f"{name} must be a non-empty string, got {type(value).__name__} {value!r:.40}"
    return None


def decode_batch(
    records: Sequence[RawRecord],
    watermark: int,
    *,
    max_message_bytes: int,
    max_future_ms: int,
) -> DecodedBatch:
    """Decode ``records`` (one partition, ascending offsets) starting from ``watermark``."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    offsets: list[int] = []
    stamps: list[int] = []
    prior: list[int] = []
    ids: list[str] = []
    times: list[int] = []
    orgs: list[str] = []
    clients: list[str] = []
    sent: list[int] = []
    sessions: list[str] = []
    types: list[str] = []
    dead: list[DeadLetter] = []
    wm = watermark
    for rec in records:
        value = rec.value
        if value is None:
            dead.append(DeadLetter(rec.offset, rec.timestamp, EMPTY, "message has no value", None))
            continue
        if len(value) > max_message_bytes:
            dead.append(
                DeadLetter(
                    rec.offset,
                    rec.timestamp,
                    OVERSIZE,
                    f"{len(value)} bytes > max_message_bytes {max_message_bytes}",
                    value[:1024],
                )
            )
            continue
        try:
            event = loads(value)
        except decode_error as exc:
            dead.append(DeadLetter(rec.offset, rec.timestamp, MALFORMED_JSON, str(exc), value))
            continue
        if type(event) is not dict:
            detail = f"expected a JSON object, got {type(event).__name__}"
            dead.append(DeadLetter(rec.offset, rec.timestamp, NOT_AN_OBJECT, detail, value))
            continue
        try:
            eid = event["event_id"]
            t = event["event_time"]
            org = event["org"]
            client = event["client"]
            nbytes = event["bytes_tx"]
            session = event["session_id"]
            etype = event["event_type"]
        except KeyError as exc:
            detail = f"missing field {exc.args[0]!r}"
            dead.append(DeadLetter(rec.offset, rec.timestamp, MISSING_FIELD, detail, value))
            continue
        if not (
            type(t) is int
            and type(nbytes) is int
            and type(eid) is str
            and type(org) is str
            and type(client) is str
            and type(session) is str
            and type(etype) is str
            and eid
            and org
            and client
            and session
            and etype
        ):
            detail = _type_problem(event) or "wrong type"
            dead.append(DeadLetter(rec.offset, rec.timestamp, WRONG_TYPE, detail, value))
            continue
        if nbytes < 0 or not EVENT_TIME_MIN_MS <= t < EVENT_TIME_MAX_MS:
            detail = (
                f"bytes_tx {nbytes} < 0"
                if nbytes < 0
                else f"event_time {t} outside [{EVENT_TIME_MIN_MS}, {EVENT_TIME_MAX_MS})"
            )
            dead.append(DeadLetter(rec.offset, rec.timestamp, OUT_OF_RANGE, detail, value))
            continue
        if wm != NO_WATERMARK and t > wm + max_future_ms:
            detail = f"event_time {t} is {(t - wm) / 1000:.0f}s ahead of the watermark {wm}"
            dead.append(DeadLetter(rec.offset, rec.timestamp, FUTURE_EVENT_TIME, detail, value))
            continue
        offsets.append(rec.offset)
        stamps.append(rec.timestamp)
        prior.append(wm)
        if t > wm:
            wm = t
        ids.append(eid)
        times.append(t)
        orgs.append(org)
        clients.append(client)
        sent.append(nbytes)
        sessions.append(session)
        types.append(etype)
    columns = {
        "event_id": np.array(ids, dtype=object),
        "event_time": np.array(times, dtype=np.int64),
        "org": np.array(orgs, dtype=object),
        "client": np.array(clients, dtype=object),
        "bytes_tx": np.array(sent, dtype=np.int64),
        "session_id": np.array(sessions, dtype=object),
        "event_type": np.array(types, dtype=object),
    }
    assert set(columns) == set(EVENT_FIELDS), "decoder out of step with the schema"
    return DecodedBatch(
        offsets=np.array(offsets, dtype=np.int64),
        kafka_timestamps=np.array(stamps, dtype=np.int64),
        columns=columns,
        prior_watermark=np.array(prior, dtype=np.int64),
        dead_letters=dead,
        watermark=wm,
        consumed=len(records),
        next_offset=records[-1].offset + 1 if records else -1,
    )
