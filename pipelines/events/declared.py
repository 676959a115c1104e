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
(the event time's still dead-letters the message).

Columns: string -> object (None for null), long and timestamp -> int64 (timestamps in epoch
ms), double -> float64, boolean -> bool. A null in a non-string column holds 0 (0.0, False)
and is marked in :attr:`DecodedBatch.nulls` (name -> mask, True where null), which has a
column only when its batch has a null in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import numpy as np
import orjson

from pipelines.events import decode as _decode
from pipelines.events.declaration import (
    EVENT_TIME,
    ColumnType,
    FieldDeclaration,
    TimeFormat,
    TopicDeclaration,
)
from pipelines.events.decode import (
    DECODER_ERROR,
    EMPTY,
    FUTURE_EVENT_TIME,
    MALFORMED_JSON,
    MAX_JSON_DEPTH,
    MISSING_FIELD,
    NO_WATERMARK,
    NOT_AN_OBJECT,
    OUT_OF_RANGE,
    OVERSIZE,
    TOO_DEEP,
    WRONG_TYPE,
    DeadLetter,
    DecodedBatch,
    RawRecord,
    RecordBatch,
    json_depth,
)
from pipelines.events.schema import EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS
from pipelines.events.times import INTEGER_FORMATS, column_to_ms, to_ms

__all__ = ["DeclaredDecoder", "decoder_for"]

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_ABSENT = object()
_DTYPES = {
    ColumnType.STRING: object,
    ColumnType.LONG: np.int64,
    ColumnType.DOUBLE: np.float64,
    ColumnType.BOOLEAN: np.bool_,
    ColumnType.TIMESTAMP: np.int64,
}
_FILL = {ColumnType.LONG: 0, ColumnType.DOUBLE: 0.0, ColumnType.BOOLEAN: False}


@dataclass(frozen=True)
class _Column:
    """One value read from the body: a declared field, or the event time."""

    name: str
    label: str
    """The path, as details name it."""
    type: ColumnType
    steps: tuple[str | int, ...]
    nullable: bool
    fmt: TimeFormat = TimeFormat.EPOCH_MS
    pattern: str | None = None
    zone: str = "UTC"
    minimum: int | float | None = None
    soft: bool = False
    """A type error makes it null (``on_type_error: null``) instead of refusing the message."""

    @property
    def event_time(self) -> bool:
        return self.name == EVENT_TIME

    # --- the exact reading ---------------------------------------------------------------

    def type_problem(self, value: Any) -> str | None:
        kind = type(value)
        t = self.type
        if t is ColumnType.STRING:
            if kind is str and (value or self.nullable):
                return None
            what = "a string" if self.nullable else "a non-empty string"
        elif t is ColumnType.LONG:
            if kind is int:
                return None
            what = "an integer"
        elif t is ColumnType.DOUBLE:
            if kind is int or kind is float:
                return None
            what = "a number"
        elif t is ColumnType.BOOLEAN:
            if kind is bool:
                return None
            what = "true or false"
        else:
            if to_ms(value, self.fmt, self.pattern, self.zone) is not None:
                return None
            what = self._time_words()
        return f"{self.label} must be {what}, got {kind.__name__} {value!r:.40}"

    def _time_words(self) -> str:
        if self.fmt in INTEGER_FORMATS:
            return "an integer" if self.event_time else f"an integer ({self.fmt.value})"
        if self.fmt is TimeFormat.EPOCH_S:
            return "a number (epoch_s)"
        if self.fmt is TimeFormat.ISO8601:
            return "an ISO-8601 time with Z or an offset"
        return f"a time like {self.pattern!r}"

    def range_problem(self, value: Any) -> str | None:
        """(Its type is right.)"""
        if self.type is ColumnType.LONG:
            low = LONG_MIN if self.minimum is None else self.minimum
            if value < low:
                return f"{self.label} {str(value)[:40]} < {low}"
            if value > LONG_MAX:
                return f"{self.label} {str(value)[:40]} > {LONG_MAX}"
        elif self.type is ColumnType.DOUBLE:
            if self.minimum is not None and value < self.minimum:
                return f"{self.label} {str(value)[:40]} < {self.minimum}"
        elif self.type is ColumnType.TIMESTAMP:
            ms = to_ms(value, self.fmt, self.pattern, self.zone)
            if not EVENT_TIME_MIN_MS <= ms < EVENT_TIME_MAX_MS:  # type: ignore[operator]
                bounds = f"[{EVENT_TIME_MIN_MS}, {EVENT_TIME_MAX_MS})"
                if self.fmt is TimeFormat.EPOCH_MS:
                    return f"{self.label} {value} outside {bounds}"
                return f"{self.label} {value!r:.40} is {ms} ms, outside {bounds}"
        return None

    def final(self, value: Any) -> Any:
        """A checked value as its column holds it."""
        if value is None:
            return None
        if self.type is ColumnType.TIMESTAMP:
            return to_ms(value, self.fmt, self.pattern, self.zone)
        if self.type is ColumnType.DOUBLE:
            return float(value)
        return value

    # --- the fast path's type ------------------------------------------------------------

    def struct_type(self) -> Any:
        t = self.type
        if t is ColumnType.STRING:
            kind: Any = str if self.nullable else Annotated[str, msgspec.Meta(min_length=1)]
        elif t is ColumnType.LONG:
            low = LONG_MIN if self.minimum is None else max(LONG_MIN, math.ceil(self.minimum))
            kind = Annotated[int, msgspec.Meta(ge=low, le=LONG_MAX)]
        elif t is ColumnType.DOUBLE:
            kind = float
            if self.minimum is not None:
                kind = Annotated[float, msgspec.Meta(ge=self.minimum)]
        elif t is ColumnType.BOOLEAN:
            kind = bool
        elif self.fmt in INTEGER_FORMATS:
            unit = {TimeFormat.EPOCH_MS: 1, TimeFormat.EPOCH_US: 1000}.get(self.fmt, 1_000_000)
            kind = Annotated[
                int, msgspec.Meta(ge=EVENT_TIME_MIN_MS * unit, lt=EVENT_TIME_MAX_MS * unit)
            ]
        elif self.fmt is TimeFormat.EPOCH_S:
            lo, hi = EVENT_TIME_MIN_MS // 1000, EVENT_TIME_MAX_MS // 1000
            kind = (
                Annotated[int, msgspec.Meta(ge=lo, lt=hi)]
                | Annotated[float, msgspec.Meta(ge=lo - 1, le=hi + 1)]  # rounded, then checked
            )
        else:
            kind = str
        return kind | None if self.nullable else kind


class DeclaredDecoder:
    """Decodes batches of one declared topic (built once per declaration by
    :func:`decoder_for`)."""

    def __init__(self, declaration: TopicDeclaration) -> None:
        self.declaration = declaration
        soft = declaration.on_type_error == "null"
        fields = [_field_column(f, soft) for f in declaration.fields]
        by_name = {c.name: c for c in fields}
        ordered = []
        if declaration.id is not None and declaration.id in by_name:
            ordered.append(by_name.pop(declaration.id))
        time = declaration.event_time
        self.time: _Column | None = None
        if time.source == "field":
            self.time = _Column(
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
        self.checks: tuple[_Column, ...] = tuple(ordered)
        """The body's values in the order the classifier looks at them."""
        self.ranges = tuple(
            [c for c in ordered if not c.event_time] + ([self.time] if self.time else [])
        )
        self.columns = ([self.time] if self.time else []) + fields
        """The body's columns, in the order :class:`DecodedBatch` holds them."""
        exact, lenient, reads = _structs(self.columns)
        self._decode_exact = msgspec.json.Decoder(exact).decode
        self._decode_lenient = msgspec.json.Decoder(lenient).decode
        self._getters = {c.name: _getter(*reads[c.name]) for c in self.columns}
        self._exact = {c.name for c in self.columns if reads[c.name][1] is not None}

    # --- the exact classifier ------------------------------------------------------------

    def classify(
        self, value: bytes | None, max_message_bytes: int, stamp: int = 0
    ) -> tuple[str, str] | dict[str, Any]:
        """Why a message is bad as (reason, detail), or its columns' values; never raises."""
        try:
            return self._check(value, max_message_bytes, stamp)
        except Exception as exc:  # a bug, not the input's fault: the message is accounted for
            return DECODER_ERROR, f"{type(exc).__name__}: {exc}"[:500]

    def _check(
        self, value: bytes | None, max_message_bytes: int, stamp: int
    ) -> tuple[str, str] | dict[str, Any]:
        if value is None:
            return EMPTY, "message has no value"
        if len(value) > max_message_bytes:
            return OVERSIZE, f"{len(value)} bytes > max_message_bytes {max_message_bytes}"
        if value.count(b"{") + value.count(b"[") > MAX_JSON_DEPTH:
            depth = json_depth(value)
            if depth > MAX_JSON_DEPTH:
                return TOO_DEEP, f"nested {depth} levels deep > {MAX_JSON_DEPTH}"
        try:
            event = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            return MALFORMED_JSON, str(exc)
        if type(event) is not dict:
            return NOT_AN_OBJECT, f"expected a JSON object, got {type(event).__name__}"
        found = {c.name: _follow(event, c) for c in self.checks}
        for c in self.checks:
            got = found[c.name]
            if got is _ABSENT and not c.nullable:
                return MISSING_FIELD, f"missing field {c.label!r}"
        out: dict[str, Any] = {}
        for c in self.checks:
            got = found[c.name]
            if type(got) is _Bad:
                problem = got.detail
            elif got is _ABSENT or got is None:
                problem = None if c.nullable else c.type_problem(None)
                got = None
            else:
                problem = c.type_problem(got)
            if problem is not None:
                if not c.soft:
                    return WRONG_TYPE, problem
                got = None
            out[c.name] = got
        for c in self.ranges:
            got = out[c.name]
            if got is None:
                continue
            problem = c.range_problem(got)
            if problem is not None:
                if not c.soft:
                    return OUT_OF_RANGE, problem
                out[c.name] = None
        if self.time is None and not EVENT_TIME_MIN_MS <= stamp < EVENT_TIME_MAX_MS:
            bounds = f"[{EVENT_TIME_MIN_MS}, {EVENT_TIME_MAX_MS})"
            return OUT_OF_RANGE, f"record timestamp {stamp} outside {bounds}"
        return {c.name: c.final(out[c.name]) for c in self.columns}

    # --- the fast path -------------------------------------------------------------------

    def _one(self, value: bytes | None, max_message_bytes: int, stamp: int) -> Any:
        try:
            if len(value) > max_message_bytes:  # type: ignore[arg-type]  # None: the slow path
                raise TypeError
            if self._exact and _brackets(value) > MAX_JSON_DEPTH:  # type: ignore[arg-type]
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
                    not guard or max(map(_brackets, run)) <= MAX_JSON_DEPTH
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
            column, null, bad = _as_column(c, self._getters[c.name](structs), c.name in self._exact)
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
                    fill = 0 if c.type is ColumnType.TIMESTAMP else _FILL[c.type]
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
            _decode._dead_letter(records, i, checked[i])
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
        )


def _brackets(value: bytes) -> int:
    """At least the message's depth (brackets in strings counted too)."""
    return value.count(b"{") + value.count(b"[")


class _Bad:
    """A path through a value that is not an object (or array): a type problem."""

    __slots__ = ("detail",)

    def __init__(self, detail: str) -> None:
        self.detail = detail


def _follow(event: Any, c: _Column) -> Any:
    """The value at ``c``'s path: the value, None, :data:`_ABSENT` or a :class:`_Bad`."""
    here = event
    walked = ""
    for step in c.steps:
        if here is None:
            return None if c.nullable else _Bad(f"{walked} must be an object, got NoneType None")
        if type(step) is int:
            if type(here) is not list:
                return _Bad(f"{walked} must be an array, got {type(here).__name__} {here!r:.40}")
            if step >= len(here):
                return _ABSENT
            here = here[step]
            walked += f"[{step}]"
        else:
            if type(here) is not dict:
                return _Bad(f"{walked} must be an object, got {type(here).__name__} {here!r:.40}")
            if step not in here:
                return _ABSENT
            here = here[step]
            walked = f"{walked}.{step}" if walked else step
    return here


def _field_column(f: FieldDeclaration, soft: bool) -> _Column:
    fmt = f.format or TimeFormat.EPOCH_MS
    return _Column(
        f.name,
        f.path or f.name,
        f.type,
        f.steps,
        f.nullable,
        fmt,
        getattr(f, "pattern", None),
        getattr(f, "zone", "UTC"),
        getattr(f, "minimum", None),
        soft,
    )


_RAW = "raw"
"""A tree node read as raw JSON (an array, or a value two readings share)."""


def _structs(
    columns: list[_Column],
) -> tuple[type, type, dict[str, tuple[tuple[str, ...], tuple[str | int, ...] | None]]]:
    """The fast path's struct (no unknown field) and the second look's (unknown fields
    skipped), nested per dotted path; and per column the attributes to its value and, for a
    value read as raw JSON, the steps left to pick it by."""
    tree: dict[str, Any] = {}
    for c in columns:
        cut = next((k for k, s in enumerate(c.steps) if type(s) is int), None)
        names = c.steps if cut is None else c.steps[: max(cut, 1)]
        node = tree
        for step in names[:-1]:
            nxt = node.setdefault(step, {})
            if not isinstance(nxt, dict):  # through a leaf: read raw from there
                node[step] = _RAW
                break
            node = nxt
        else:
            leaf = names[-1]
            if cut is not None or leaf in node:
                node[leaf] = _RAW
            else:
                node[leaf] = c
    reads: dict[str, tuple[tuple[str, ...], tuple[str | int, ...] | None]] = {}
    for c in columns:
        node = tree
        for depth, step in enumerate(c.steps):
            node = node[step]
            if node is _RAW:
                reads[c.name] = (tuple(c.steps[: depth + 1]), tuple(c.steps[depth + 1 :]))  # type: ignore[arg-type]
                break
            if not isinstance(node, dict):
                reads[c.name] = (tuple(c.steps), None)  # type: ignore[arg-type]
                break

    def build(node: dict[str, Any], forbid: bool, name: str) -> tuple[type, bool]:
        fields: list[tuple[Any, ...]] = []
        optional = True
        for key, sub in node.items():
            if isinstance(sub, dict):
                kind, all_optional = build(sub, forbid, f"{name}_{key}")
                if all_optional:
                    fields.append((key, kind | None, None))
                else:
                    fields.append((key, kind))
                    optional = False
            elif sub is _RAW:
                fields.append((key, msgspec.Raw | None, None))
            elif sub.nullable:
                fields.append((key, sub.struct_type(), None))
            else:
                fields.append((key, sub.struct_type()))
                optional = False
        fields.sort(key=len)  # required fields first, as a struct's signature needs
        struct = msgspec.defstruct(name, fields, forbid_unknown_fields=forbid, gc=False)
        return struct, optional

    return build(tree, True, "Exact")[0], build(tree, False, "Lenient")[0], reads


def _getter(
    names: tuple[str, ...], rest: tuple[str | int, ...] | None
) -> Callable[[list[Any]], list[Any]]:
    """Values at ``names`` of each struct (None under a None); past them, for a value read as
    raw JSON, the value ``rest`` picks from it (:data:`_RAW_BAD` if the path does not
    follow)."""
    picks = [attrgetter(name) for name in names]

    def get(structs: list[Any]) -> list[Any]:
        values = list(map(picks[0], structs))  # a struct is never None
        for pick in picks[1:]:
            if None in values:
                values = [None if v is None else pick(v) for v in values]
            else:
                values = list(map(pick, values))
        if rest is not None:
            values = [_pick_raw(v, rest) for v in values]
        return values

    return get


_RAW_BAD = object()


def _pick_raw(raw: Any, steps: tuple[str | int, ...]) -> Any:
    if raw is None:
        return None
    if type(raw) is not msgspec.Raw:  # a leaf typed raw because two readings share it
        return _RAW_BAD
    try:
        here = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _RAW_BAD
    for step in steps:
        if here is None:
            return None
        if type(step) is int:
            if type(here) is not list:
                return _RAW_BAD
            if step >= len(here):
                return None
            here = here[step]
        else:
            if type(here) is not dict:
                return _RAW_BAD
            here = here.get(step)
    return here


def _as_column(
    c: _Column, raw: list[Any], exact: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``raw`` (a column's values as the fast path read them) as the column, its null mask
    and a mask of values refused here (each then classified). ``exact``: the values were
    picked from raw JSON, so the exact checks apply to each."""
    bad = None
    if exact:
        bad = np.zeros(len(raw), dtype=bool)
        checked: list[Any] = []
        for k, v in enumerate(raw):
            if (
                v is _RAW_BAD
                or (v is None and not c.nullable)
                or (v is not None and (c.type_problem(v) or c.range_problem(v)))
            ):
                bad[k] = True
                v = None
            checked.append(None if v is None else c.final(v))
        raw = checked
        if not bad.any():
            bad = None
    if c.type is ColumnType.STRING:
        return np.array(raw, dtype=object), None, bad
    null = None
    if (exact or c.nullable or c.soft) and None in raw:  # else the fast path read no null
        null = np.array([v is None for v in raw])
    if c.type is not ColumnType.TIMESTAMP:
        if null is not None:
            fill = _FILL[c.type]
            raw = [fill if v is None else v for v in raw]
        return np.array(raw, dtype=_DTYPES[c.type]), null, bad
    if exact:  # already epoch ms, in range
        return np.array([0 if v is None else v for v in raw], dtype=np.int64), null, bad
    if null is None:
        column, refused = column_to_ms(raw, c.fmt, c.pattern, c.zone)
    else:
        some = np.flatnonzero(~null)
        part, refused_part = column_to_ms([raw[i] for i in some], c.fmt, c.pattern, c.zone)
        column = np.zeros(len(raw), dtype=np.int64)
        column[some] = part
        refused = None
        if refused_part is not None:
            refused = np.zeros(len(raw), dtype=bool)
            refused[some] = refused_part
    outside = (column < EVENT_TIME_MIN_MS) | (column >= EVENT_TIME_MAX_MS)
    if null is not None:
        outside &= ~null
    if refused is not None:
        outside |= refused
    if outside.any():
        bad = outside if bad is None else (bad | outside)
    return column, null, bad


def _watermarks(
    times: np.ndarray, watermark: int, max_future_ms: int
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The watermark before each event, and the (index, watermark before it) of each event
    too far ahead of it (today's rule, :func:`~pipelines.events.decode._accept`)."""
    accepted = _decode._accept(times, watermark, max_future_ms) if len(times) else None
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
