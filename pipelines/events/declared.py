"""The decoder of a declared topic: :func:`decoder_for` builds it from the topic's declaration.

It keeps :func:`~pipelines.events.decode.decode_batch`'s contract (the same
:class:`DecodedBatch`, dead-letter reasons, watermark before each event) and its two paths:

- **The fast path**: msgspec structs defined at run time from the declaration (a nested struct
  per dotted path, the declared type and range of each leaf, no field beyond the declared
  ones), one ``map`` over a run of :data:`RUN` messages; a refused message gets the same
  second look as today (decoded leniently when it has at most ``MAX_JSON_DEPTH`` brackets).
  A path through an array is read as the array's raw JSON and picked by the exact reading.
- **The exact classifier** (:meth:`DeclaredDecoder.classify`): the reference semantics, so
  dead-letter reasons and details never depend on the fast path. After the checks that need
  no schema (empty, oversize, too_deep, malformed_json, not_an_object), in three rounds over
  the id, then the event time, then the fields in declared order: a required value absent
  (``missing_field``), a value not of its type (``wrong_type``: a JSON type, a time that does
  not read in its format, a path through a value that is not an object or array), a value out
  of its range (``out_of_range``: a long beyond int64 or below its ``minimum``, a time outside
  2000-2100; the event time's last). Details name the field's path, the declared type and the
  value's start.

Values: a required string is non-empty; ``long`` refuses booleans and fractions; ``double``
takes integers; a nullable field absent or null (or under a null object) is null. Under
``on_type_error: null``, a field's ``wrong_type`` or ``out_of_range`` makes it null instead
(the event time's still dead-letters the message). A dead letter names the field whose value
did not fit (:attr:`DeadLetter.field`), and each batch counts the values it made null per
field and reason (:attr:`DecodedBatch.nulled`), whichever path read them.

Columns: string -> object (None for null), long and timestamp -> int64 (timestamps in epoch
ms), double -> float64, boolean -> bool. A null in a non-string column holds 0 (0.0, False)
and is marked in :attr:`DecodedBatch.nulls` (name -> mask, True where null), which has a
column only when its batch has a null in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from pipelines.events import decode as _decode
from pipelines.events.declaration import (
    EVENT_TIME,
    EVENT_TIME_MAX_MS,
    EVENT_TIME_MIN_MS,
    ColumnType,
    TopicDeclaration,
)
from pipelines.events.decode import (
    DECODER_ERROR,
    FUTURE_EVENT_TIME,
    MAX_JSON_DEPTH,
    MISSING_FIELD,
    NO_WATERMARK,
    NULLED,
    OUT_OF_RANGE,
    WRONG_TYPE,
    DeadLetter,
    DecodedBatch,
    RawRecord,
    RecordBatch,
    parse_object,
)
from pipelines.expressions.derived import derive

__all__ = ["DeclaredDecoder", "decoder_for"]


from pipelines.events.fast_path import as_column, brackets, getter, structs
from pipelines.events.readings import ABSENT, FILL, Bad, Reading, field_reading, follow


class DeclaredDecoder:
    """Decodes batches of one declared topic (built once per declaration by
    :func:`decoder_for`)."""

    def __init__(self, declaration: TopicDeclaration) -> None:
        self.declaration = declaration
        soft = declaration.on_type_error == "null"
        fields = [field_reading(f, soft) for f in declaration.fields]
        by_name = {c.name: c for c in fields}
        ordered = []
        if declaration.id is not None and declaration.id in by_name:
            ordered.append(by_name.pop(declaration.id))
        time = declaration.event_time
        self.time: Reading | None = None
        if time.source == "field":
            self.time = Reading(
                EVENT_TIME,
                time.path or EVENT_TIME,
                ColumnType.TIMESTAMP,
                time.steps,
                False,
                time.format,
                time.pattern,
                time.zone,
            )
            ordered.append(self.time)
        ordered += list(by_name.values())
        self.checks: tuple[Reading, ...] = tuple(ordered)
        """The body's values in the order the classifier looks at them."""
        self.ranges = tuple(
            [c for c in ordered if not c.event_time] + ([self.time] if self.time else [])
        )
        self.columns = ([self.time] if self.time else []) + fields
        """The body's columns, in the order :class:`DecodedBatch` holds them."""
        exact, lenient, reads = structs(self.columns)
        self._decode_exact = msgspec.json.Decoder(exact).decode
        self._decode_lenient = msgspec.json.Decoder(lenient).decode
        self._getters = {c.name: getter(*reads[c.name]) for c in self.columns}
        self._exact = {c.name for c in self.columns if reads[c.name][1] is not None}
        self._derived = declaration.derived_columns()

    # --- the exact classifier ------------------------------------------------------------

    def classify(
        self, value: bytes | None, max_message_bytes: int, stamp: int = 0
    ) -> tuple[str, ...] | dict[str, Any]:
        """Why a message is bad as (reason, detail) or (reason, detail, field), or its
        columns' values (:meth:`read`); never raises."""
        try:
            return self._check(value, max_message_bytes, stamp)
        except Exception as exc:  # a bug, not the input's fault: the message is accounted for
            return DECODER_ERROR, f"{type(exc).__name__}: {exc}"[:500]

    def _check(
        self, value: bytes | None, max_message_bytes: int, stamp: int
    ) -> tuple[str, ...] | dict[str, Any]:
        event = parse_object(value, max_message_bytes)
        if type(event) is tuple:
            return event
        return self.read(event, stamp)

    def read(self, event: dict[str, Any], stamp: int) -> tuple[str, ...] | dict[str, Any]:
        """Why a parsed message (a JSON object, or a deserialized Avro record) is bad as
        (reason, detail, field), or its columns' values: the readings every encoding shares.
        Values made null under ``on_type_error: null`` are listed, as (field, reason), under
        :data:`~pipelines.events.decode.NULLED`."""
        found = {c.name: follow(event, c) for c in self.checks}
        for c in self.checks:
            got = found[c.name]
            if got is ABSENT and not c.nullable:
                return MISSING_FIELD, f"missing field {c.label!r}", c.name
        out: dict[str, Any] = {}
        nulled: list[tuple[str, str]] = []
        for c in self.checks:
            got = found[c.name]
            if type(got) is Bad:
                problem = got.detail
            elif got is ABSENT or got is None:
                problem = None if c.nullable else c.type_problem(None)
                got = None
            else:
                problem = c.type_problem(got)
            if problem is not None:
                if not c.soft:
                    return WRONG_TYPE, problem, c.name
                nulled.append((c.name, WRONG_TYPE))
                got = None
            out[c.name] = got
        for c in self.ranges:
            got = out[c.name]
            if got is None:
                continue
            problem = c.range_problem(got)
            if problem is not None:
                if not c.soft:
                    return OUT_OF_RANGE, problem, c.name
                nulled.append((c.name, OUT_OF_RANGE))
                out[c.name] = None
        if self.time is None and not EVENT_TIME_MIN_MS <= stamp < EVENT_TIME_MAX_MS:
            bounds = f"[{EVENT_TIME_MIN_MS}, {EVENT_TIME_MAX_MS})"
            return OUT_OF_RANGE, f"record timestamp {stamp} outside {bounds}"
        values = {c.name: c.final(out[c.name]) for c in self.columns}
        if nulled:
            values[NULLED] = nulled
        return values

    # --- the fast path -------------------------------------------------------------------

    def _one(self, value: bytes | None, max_message_bytes: int, stamp: int) -> Any:
        try:
            if len(value) > max_message_bytes:  # type: ignore[arg-type]  # None: the slow path
                raise TypeError
            if self._exact and brackets(value) > MAX_JSON_DEPTH:  # type: ignore[arg-type]
                raise TypeError  # raw JSON is read past the fast path: never too deep
            return self._decode_exact(value)
        except Exception:  # whatever the fast path refuses gets a second look, never raises
            pass
        try:
            if (
                len(value) <= max_message_bytes  # type: ignore[arg-type]
                and value.count(b"{") + value.count(b"[") <= MAX_JSON_DEPTH  # type: ignore[union-attr]
            ):
                return self._decode_lenient(value)
        except Exception:  # not an event with extra fields: the classifier says what it is
            pass
        return self.classify(value, max_message_bytes, stamp)

    def _decode_values(
        self, records: RecordBatch, max_message_bytes: int, slow: list[int]
    ) -> list[Any]:
        """Each message's struct, the classifier's values or its (reason, detail), in order;
        the indices of those not decoded by a run's one ``map`` are appended to ``slow``."""
        values = records.values
        decode = self._decode_exact
        out: list[Any] = []
        run_length = _decode.RUN
        guard = bool(self._exact)
        for lo in range(0, len(values), run_length):
            run = values[lo : lo + run_length]
            try:
                if max(map(len, run)) <= max_message_bytes and (  # type: ignore[arg-type]
                    not guard or max(map(brackets, run)) <= MAX_JSON_DEPTH
                ):
                    out.extend(list(map(decode, run)))
                    continue
            except Exception:  # refused: the run is decoded message by message
                pass
            stamps = records.timestamps
            for i, value in enumerate(run, start=lo):
                checked = self._one(value, max_message_bytes, stamps[i])
                if type(checked) is tuple or type(checked) is dict:
                    slow.append(i)
                out.append(checked)
        return out

    def _columns(
        self, events: list[Any], records: RecordBatch, at: list[int] | None, rows: list[int]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[int]]:
        """The events (structs, or at ``rows`` the classifier's dicts) as columns, their null
        masks, and the positions in ``events`` of those the columns refuse (a time that does
        not read); ``at``: each event's index among the messages (None: all are events)."""
        structs = events if not rows else [e for e in events if type(e) is not dict]
        where = None
        if rows:
            mask = np.ones(len(events), dtype=bool)
            mask[rows] = False
            where = np.flatnonzero(mask)
        columns: dict[str, np.ndarray] = {}
        nulls: dict[str, np.ndarray] = {}
        refused: set[int] = set()
        for c in self.columns:
            column, null, bad = as_column(c, self._getters[c.name](structs), c.name in self._exact)
            if bad is not None:
                found = np.flatnonzero(bad)
                refused.update((found if where is None else where[found]).tolist())
            if rows:  # the classifier's values in their places
                extra = [events[k][c.name] for k in rows]
                full = np.empty(len(events), dtype=column.dtype)
                full[where] = column
                whole = np.zeros(len(events), dtype=bool)
                if null is not None:
                    whole[where] = null
                if c.type is ColumnType.STRING:
                    full[rows] = np.array(extra, dtype=object)
                else:
                    fill = 0 if c.type is ColumnType.TIMESTAMP else FILL[c.type]
                    full[rows] = [fill if v is None else v for v in extra]
                    whole[rows] = [v is None for v in extra]
                column, null = full, whole
            columns[c.name] = column
            if null is not None and null.any():
                nulls[c.name] = null
        if self.time is None:  # the record's timestamp
            stamps = records.timestamps
            t = np.array(stamps if at is None else [stamps[i] for i in at], dtype=np.int64)
            columns = {EVENT_TIME: t, **columns}
            outside = (t < EVENT_TIME_MIN_MS) | (t >= EVENT_TIME_MAX_MS)
            if rows:
                outside[rows] = False
            refused.update(np.flatnonzero(outside).tolist())
        return columns, nulls, sorted(refused)

    def _record_columns(self, records: RecordBatch, at: np.ndarray, partition: int) -> dict:
        spec = self.declaration.record
        out: dict[str, np.ndarray] = {}
        if spec.key is not None:
            keys = records.keys
            out[spec.key] = np.array(
                [None if keys[i] is None else keys[i].decode("utf-8", "replace") for i in at],  # type: ignore[union-attr]
                dtype=object,
            )
        if spec.timestamp is not None:
            out[spec.timestamp] = np.asarray(records.timestamps, dtype=np.int64)[at]
        if spec.partition is not None:
            out[spec.partition] = np.full(len(at), partition, dtype=np.int64)
        if spec.offset is not None:
            out[spec.offset] = np.asarray(records.offsets, dtype=np.int64)[at]
        for column, header in spec.headers.items():
            headers = records.headers
            values = []
            for i in at:
                found = None
                for name, raw in (headers[i] or ()) if headers is not None else ():
                    if name == header and raw is not None:
                        found = raw.decode("utf-8", "replace")
                values.append(found)
            out[column] = np.array(values, dtype=object)
        return out

    def __call__(
        self,
        records: RecordBatch | Sequence[RawRecord],
        watermark: int,
        *,
        max_message_bytes: int,
        max_future_ms: int,
        partition: int = -1,
    ) -> DecodedBatch:
        """Decode ``records`` (one partition, ascending offsets) starting from ``watermark``."""
        if not isinstance(records, RecordBatch):
            records = RecordBatch.of(records)
        slow: list[int] = []
        checked = self._decode_values(records, max_message_bytes, slow)
        n = len(checked)
        while True:
            at: list[int] | None = None
            rows: list[int] = []
            events = checked
            if slow:  # rare: messages off the fast path
                bad = [i for i in slow if type(checked[i]) is tuple]
                kept = [i for i in slow if type(checked[i]) is dict]
                if bad:
                    valid = np.ones(n, dtype=bool)
                    valid[bad] = False
                    where = np.flatnonzero(valid)
                    at = where.tolist()
                    events = [c for c in checked if type(c) is not tuple]
                    rows = np.searchsorted(where, kept).tolist() if kept else []
                else:
                    rows = kept
            columns, nulls, refused = self._columns(events, records, at, rows)
            if not refused:
                break
            for k in refused:  # the fast path's reading refused: the classifier decides
                i = k if at is None else at[k]
                checked[i] = self.classify(
                    records.values[i], max_message_bytes, records.timestamps[i]
                )
                slow.append(i)
        dead = [
            _decode.dead_letter(records, i, checked[i])
            for i in sorted(set(slow))
            if type(checked[i]) is tuple
        ]
        times = columns[EVENT_TIME]
        prior, ahead = _watermarks(times, watermark, max_future_ms)
        index = np.arange(n, dtype=np.int64) if at is None else np.asarray(at, dtype=np.int64)
        if ahead:
            keep = np.ones(len(index), dtype=bool)
            for k, wm in ahead:
                i = int(index[k])
                t = int(times[k])
                detail = f"event_time {t} is {(t - wm) / 1000:.0f}s ahead of the watermark {wm}"
                dead.append(
                    DeadLetter(
                        records.offsets[i],
                        records.timestamps[i],
                        FUTURE_EVENT_TIME,
                        detail,
                        records.values[i],
                    )
                )
                keep[k] = False
            dead.sort(key=attrgetter("offset"))
            columns = {name: column[keep] for name, column in columns.items()}
            nulls = {name: mask[keep] for name, mask in nulls.items() if mask[keep].any()}
            prior, times, index = prior[keep], times[keep], index[keep]
        columns.update(self._record_columns(records, index, partition))
        nulled, nulled_at = _nulled(checked, slow, index if ahead else None, records.offsets)
        if self._derived:  # computed from the batch's columns, as the correction does
            derive(self._derived, columns, nulls)
        offsets = np.array(records.offsets, dtype=np.int64)
        stamps = np.array(records.timestamps, dtype=np.int64)
        if len(index) != n:
            offsets, stamps = offsets[index], stamps[index]
        return DecodedBatch(
            offsets=offsets,
            kafka_timestamps=stamps,
            columns=columns,
            prior_watermark=prior,
            dead_letters=dead,
            watermark=max(watermark, int(times.max())) if len(times) else watermark,
            consumed=n,
            next_offset=records.offsets[-1] + 1 if n else -1,
            nulls=nulls,
            nulled=nulled,
            nulled_at=nulled_at,
        )


def _nulled(
    checked: list[Any], slow: list[int], kept: np.ndarray | None, offsets: list[int]
) -> tuple[dict[tuple[str, str], int], dict[int, list[tuple[str, str]]]]:
    """Values made null under ``on_type_error: null`` per (field, reason), over the events
    kept (``kept``: their indices, None: every event), and per event (by its offset). Only the exact reading makes a value
    null (the fast path refuses what does not fit), so the messages it read say it all."""
    counts: dict[tuple[str, str], int] = {}
    at: dict[int, list[tuple[str, str]]] = {}
    held = None if kept is None else set(kept.tolist())
    for i in sorted(set(slow)):
        got = checked[i]
        if type(got) is dict and NULLED in got and (held is None or i in held):
            at[offsets[i]] = list(got[NULLED])
            for key in got[NULLED]:
                counts[key] = counts.get(key, 0) + 1
    return counts, at


def _watermarks(
    times: np.ndarray, watermark: int, max_future_ms: int
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The watermark before each event, and the (index, watermark before it) of each event
    too far ahead of it (today's rule, :func:`~pipelines.events.decode.watermarks_before`)."""
    accepted = _decode.watermarks_before(times, watermark, max_future_ms) if len(times) else None
    if accepted is not None:
        return accepted
    prior = np.empty(len(times), dtype=np.int64)
    ahead = []
    wm = watermark
    for k, t in enumerate(times.tolist()):
        prior[k] = wm
        if wm != NO_WATERMARK and t > wm + max_future_ms:
            ahead.append((k, wm))
            continue
        if t > wm:
            wm = t
    return prior, ahead


_DECODERS: dict[str, DeclaredDecoder] = {}


def decoder_for(declaration: TopicDeclaration) -> DeclaredDecoder:
    """The decoder of ``declaration``'s topic, built once per declaration (keyed by its JSON:
    a declaration holds a dict, so it is not hashable)."""
    key = declaration.model_dump_json()
    decoder = _DECODERS.get(key)
    if decoder is None:
        decoder = _DECODERS[key] = DeclaredDecoder(declaration)
    return decoder
