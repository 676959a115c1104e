"""The decoder of a topic declared ``encoding: avro``: each message's Avro body read into a
record (a dict), then the same readings as a JSON object's
(:meth:`~pipelines.events.declared.DeclaredDecoder.read`), so types, nulls, ranges and
dead-letter reasons are the JSON decoder's, and it returns the same
:class:`~pipelines.events.decode.DecodedBatch`.

The body is read one of two ways:

- **through the schema registry** (no ``schema_file``): Confluent's wire format, a magic byte 0
  and a 4-byte big-endian schema id, read by confluent-kafka's ``AvroDeserializer`` with the
  writer's schema that the registry's client resolves (and caches) by id;
- **with the declaration's schema file**: the body alone (``framing: plain``) or after
  Confluent's five bytes (``framing: confluent``, the id then unused).

A record is read with its writer's schema, not projected onto a reader's: a field that a
schema version lacks is absent, so a column added later (declared ``nullable``) reads as null
in the records of older versions, and a required one dead-letters them as ``missing_field``.

Dead letters of their own: ``malformed_avro`` (no magic byte 0, too short, a body that does
not read with its schema) and ``unknown_schema`` (an id the registry does not know). Every
detail of an Avro message names its schema id. Logical types read as Python times are given
back in their reading's format (epoch units, or ISO-8601) before the readings see them.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from operator import itemgetter
from typing import Any

import fastavro
import numpy as np
from confluent_kafka.schema_registry.avro import AvroDeserializer

from pipelines.events.avro_fields import read_schema_file
from pipelines.events.declaration import (
    EVENT_TIME_MAX_MS,
    EVENT_TIME_MIN_MS,
    ColumnType,
    TimeFormat,
    TopicDeclaration,
)
from pipelines.events.declared import DeclaredDecoder
from pipelines.events.decode import (
    DECODER_ERROR,
    EMPTY,
    MALFORMED_AVRO,
    NOT_AN_OBJECT,
    OVERSIZE,
    UNKNOWN_SCHEMA,
    RecordBatch,
)
from pipelines.events.readings import LONG_MAX, LONG_MIN, Reading
from pipelines.events.registry import is_not_found, registry_client, unreachable
from pipelines.events.times import to_ms
from pipelines.exceptions import SchemaRegistryUnreachable

__all__ = ["AvroDecoder", "avro_decoder_for", "schema_id_of"]

log = logging.getLogger(__name__)

MAGIC = 0
"""The first byte of Confluent's wire format (then a 4-byte big-endian schema id)."""
HEADER = 5

UNKNOWN_RETRY_S = 60.0
"""An id the registry did not know is asked again after this long (one request per id, not
per message, meanwhile)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def schema_id_of(value: bytes) -> int | None:
    """The schema id of a message in Confluent's wire format (None: not in it)."""
    if len(value) < HEADER or value[0] != MAGIC:
        return None
    return int.from_bytes(value[1:HEADER], "big")


Body = Callable[[bytes], tuple[Any, str] | tuple[str, str, None]]


class RegistryBody:
    """Bodies in Confluent's wire format, schemas resolved through the registry."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self._deserialize = AvroDeserializer(registry_client(conf))
        self._unknown: dict[int, float] = {}
        self._lock = threading.Lock()

    def __call__(self, value: bytes) -> tuple[Any, str] | tuple[str, str, None]:
        """(record, "schema id N"), or (reason, detail, None)."""
        schema_id = schema_id_of(value)
        if schema_id is None:
            return MALFORMED_AVRO, _not_framed(value), None
        where = f"schema id {schema_id}"
        with self._lock:
            asked = self._unknown.get(schema_id)
        if asked is not None and time.monotonic() - asked < UNKNOWN_RETRY_S:
            return UNKNOWN_SCHEMA, f"{where} is unknown to the schema registry", None
        try:
            return self._deserialize(value), where
        except Exception as exc:
            if is_not_found(exc):
                with self._lock:
                    self._unknown[schema_id] = time.monotonic()
                return UNKNOWN_SCHEMA, f"{where} is unknown to the schema registry: {exc}", None
            if _from_registry(exc):
                raise unreachable(exc, where) from None
            return MALFORMED_AVRO, f"{where}: the body does not read: {_said(exc)}", None


class FileBody:
    """Bodies read with the declaration's schema file."""

    def __init__(self, path: str, framed: bool) -> None:
        self.schema = fastavro.parse_schema(read_schema_file(path))
        self.framed = framed
        self.where = f"schema file {path}"

    def __call__(self, value: bytes) -> tuple[Any, str] | tuple[str, str, None]:
        where = self.where
        start = 0
        if self.framed:
            schema_id = schema_id_of(value)
            if schema_id is None:
                return MALFORMED_AVRO, _not_framed(value), None
            where = f"schema id {schema_id}, read with the {where}"
            start = HEADER
        body = io.BytesIO(value)
        body.seek(start)
        try:
            record = fastavro.schemaless_reader(body, self.schema, None)
        except Exception as exc:
            return MALFORMED_AVRO, f"{where}: the body does not read: {_said(exc)}", None
        left = len(value) - body.tell()
        if left:
            return MALFORMED_AVRO, f"{where}: {left} bytes left after the record", None
        return record, where


def _not_framed(value: bytes) -> str:
    if len(value) < HEADER:
        return f"{len(value)} bytes: too short for Confluent's wire format (magic byte, schema id)"
    return f"magic byte {value[0]}, expected {MAGIC} (Confluent's wire format)"


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _from_registry(exc: BaseException) -> bool:
    """Whether ``exc`` is the registry's (or its transport's) failure, not the body's."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError):
        return True
    module = type(exc).__module__ or ""
    return module.startswith(("httpx", "httpcore", "ssl", "socket")) or isinstance(exc, OSError)


def _time_in(value: Any, c: Reading) -> Any:
    """A time Avro gave as a Python time, as ``c``'s format reads it."""
    if type(value) is date:
        value = datetime(value.year, value.month, value.day, tzinfo=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    us = (value - _EPOCH) // _MICROSECOND
    if c.fmt is TimeFormat.EPOCH_MS:
        return us // 1000
    if c.fmt is TimeFormat.EPOCH_US:
        return us
    if c.fmt is TimeFormat.EPOCH_NS:
        return us * 1000
    if c.fmt is TimeFormat.EPOCH_S:
        return us / 1_000_000
    return value.isoformat()


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


class AvroDecoder(DeclaredDecoder):
    """Decodes batches of one topic declared ``encoding: avro`` (built by
    :func:`avro_decoder_for`)."""

    def __init__(self, declaration: TopicDeclaration, body: Body) -> None:
        super().__init__(declaration)
        self.body = body
        self._times = [c for c in self.checks if c.type is ColumnType.TIMESTAMP]
        self._names = [c.name for c in self.columns]
        self._arrays = any(type(s) is int for c in self.columns for s in c.steps)
        """A path through an array: every record is read by the readings."""

    def classify(
        self, value: bytes | None, max_message_bytes: int, stamp: int = 0
    ) -> tuple[str, ...] | dict[str, Any]:
        """Why a message is bad as (reason, detail) or (reason, detail, field), or its
        columns' values; raises only
        :class:`SchemaRegistryUnreachable`."""
        try:
            return self._avro(value, max_message_bytes, stamp)
        except SchemaRegistryUnreachable:
            raise
        except Exception as exc:  # a bug, not the input's fault: the message is accounted for
            return DECODER_ERROR, _said(exc)[:500]

    def _avro(
        self, value: bytes | None, max_message_bytes: int, stamp: int
    ) -> tuple[str, ...] | dict[str, Any]:
        got = self._body(value, max_message_bytes)
        if len(got) == 3:
            return got[0], got[1]
        return self._read_exactly(got[0], got[1], stamp)

    def _decode_values(
        self, records: RecordBatch, max_message_bytes: int, slow: list[int]
    ) -> list[Any]:
        """Each message's values or (reason, detail), all of them in ``slow`` (the batch's
        columns are built from these dicts).

        The bodies are read one by one; then each column's values are taken from all the
        records at once and checked in bulk (:func:`_fast_column`). A record with any value
        the bulk checks do not pass, and every record when a path goes through an array, is
        read by :meth:`read` (the readings, which give the reason), so the fast path only
        ever accepts what the readings accept, with the same values."""
        out: list[Any] = []
        where: list[str] = []
        for value in records.values:
            got = self._body(value, max_message_bytes)
            out.append(got[0] if len(got) == 2 else got[:2])
            where.append(got[1])
        slow.extend(range(len(out)))
        at = [k for k, got in enumerate(out) if type(got) is dict]
        if not at:
            return out
        bodies = [out[k] for k in at]
        exact = np.zeros(len(at), dtype=bool)
        columns: list[list[Any]] = []
        try:
            if self._arrays:
                raise TypeError("a path through an array")
            for c in self.columns:
                values, refused = _fast_column(c, _column_of(bodies, c.steps))
                columns.append(values)
                if refused is not None:
                    exact |= refused
        except Exception:  # whatever the bulk checks cannot take, the readings decide
            exact[:] = True
        stamps = records.timestamps
        names = self._names
        if not exact.all():
            rows = list(zip(*columns, strict=True))
            for k in np.flatnonzero(~exact).tolist():
                out[at[k]] = dict(zip(names, rows[k], strict=True))
        for k in np.flatnonzero(exact).tolist():
            i = at[k]
            out[i] = self._read_exactly(bodies[k], where[i], stamps[i])
        return out

    def _body(self, value: bytes | None, max_message_bytes: int) -> tuple[Any, ...]:
        """(record, where) or (reason, detail, ""); raises only
        :class:`SchemaRegistryUnreachable`."""
        try:
            if value is None:
                return EMPTY, "message has no value", ""
            if len(value) > max_message_bytes:
                return OVERSIZE, f"{len(value)} bytes > max_message_bytes {max_message_bytes}", ""
            got = self.body(value)
            if len(got) == 3:
                return got[0], got[1], ""
            record, where = got
            if type(record) is not dict:
                return NOT_AN_OBJECT, f"{where}: expected a record, got {type(record).__name__}", ""
            return record, where
        except SchemaRegistryUnreachable:
            raise
        except Exception as exc:  # a bug, not the input's fault: the message is accounted for
            return DECODER_ERROR, _said(exc)[:500], ""

    def _read_exactly(self, record: dict[str, Any], where: str, stamp: int) -> Any:
        try:
            for c in self._times:
                _times_to_format(record, c)
            checked = self.read(record, stamp)
        except Exception as exc:  # a bug, not the input's fault
            return DECODER_ERROR, _said(exc)[:500]
        if type(checked) is tuple:
            return checked[0], f"{checked[1]} ({where})", *checked[2:]
        return checked


_ABSENT = object()
_THROUGH = object()
_TYPES = {
    ColumnType.STRING: frozenset({str}),
    ColumnType.LONG: frozenset({int}),
    ColumnType.DOUBLE: frozenset({int, float}),
    ColumnType.BOOLEAN: frozenset({bool}),
}
_NULL = frozenset({type(None)})


def _at_path(record: dict[str, Any], steps: tuple[str | int, ...]) -> Any:
    """The value at ``steps`` (names only): :data:`_ABSENT` where a name is missing, None
    under a null record, :data:`_THROUGH` through a value that is no record (never accepted:
    the readings then say what it is)."""
    here: Any = record
    for step in steps:
        if type(here) is not dict:
            return None if here is None else _THROUGH
        here = here.get(step, _ABSENT)  # type: ignore[call-overload]
        if here is _ABSENT:
            return _ABSENT
    return here


def _column_of(bodies: list[dict[str, Any]], steps: tuple[str | int, ...]) -> list[Any]:
    """The value at ``steps`` of each record: by C lookups while every step is there, else
    record by record (:func:`_at_path`)."""
    try:
        values = list(map(itemgetter(steps[0]), bodies))
        for step in steps[1:]:
            values = list(map(itemgetter(step), values))
        return values  # every step was a record's field (a name indexes nothing else)
    except (KeyError, TypeError, IndexError):
        pass
    return [_at_path(b, steps) for b in bodies]


def _fast_column(c: Reading, values: list[Any]) -> tuple[list[Any], np.ndarray | None]:
    """``values`` (one column of every record) as the column holds them, and a mask of those
    the bulk checks do not pass (each then read by the readings), or None when all pass.

    A value passes when the readings would take it unchanged: of the type's Python types (or
    null, or absent, in a nullable column), a required string non-empty, a long within int64
    and its ``minimum``, a double at least its ``minimum``, a time that reads in its format
    and falls in the event-time range."""
    n = len(values)
    refused: np.ndarray | None = None

    def refuse(where: list[int] | np.ndarray) -> None:
        nonlocal refused
        if len(where):
            if refused is None:
                refused = np.zeros(n, dtype=bool)
            refused[where] = True

    if c.nullable and _ABSENT in values:
        values = [None if v is _ABSENT else v for v in values]
    kinds = set(map(type, values))
    allowed = (_TYPES.get(c.type) or kinds) | (_NULL if c.nullable else frozenset())
    if not kinds <= allowed:
        refuse([k for k, v in enumerate(values) if type(v) not in allowed])
    if c.type is ColumnType.STRING:
        if not c.nullable and "" in values:
            refuse([k for k, v in enumerate(values) if v == ""])
    elif c.type is ColumnType.TIMESTAMP:
        values = [_fast_time(v, c) for v in values]
        refuse([k for k, v in enumerate(values) if v is _ABSENT])
    elif c.type is not ColumnType.BOOLEAN:
        low = c.minimum
        if c.type is ColumnType.LONG:
            low = LONG_MIN if low is None else max(low, LONG_MIN)
        high = LONG_MAX if c.type is ColumnType.LONG else None
        numbers = [v for v in values if type(v) is int or type(v) is float]
        if numbers and (
            (low is not None and min(numbers) < low) or (high is not None and max(numbers) > high)
        ):
            refuse(
                [
                    k
                    for k, v in enumerate(values)
                    if (type(v) is int or type(v) is float)
                    and ((low is not None and v < low) or (high is not None and v > high))
                ]
            )
    if refused is not None:
        values = [None if r else v for v, r in zip(values, refused.tolist(), strict=True)]
    return values, refused


def _fast_time(value: Any, c: Reading) -> Any:
    """A time value as epoch ms in range, None for a null, :data:`_ABSENT` when the readings
    must look at it."""
    if value is None:
        return None if c.nullable else _ABSENT
    if isinstance(value, date):
        value = _time_in(value, c)
    ms = to_ms(value, c.fmt, c.pattern, c.zone)
    if ms is None or not EVENT_TIME_MIN_MS <= ms < EVENT_TIME_MAX_MS:
        return _ABSENT
    return ms


def _times_to_format(record: dict[str, Any], c: Reading) -> None:
    """Replace the Python time at ``c``'s path in ``record`` (if one is there) by ``c``'s format."""
    here: Any = record
    for step in c.steps[:-1]:
        if type(step) is int:
            if type(here) is not list or step >= len(here):
                return
        elif type(here) is not dict:
            return
        here = here[step] if type(step) is int else here.get(step)
    last = c.steps[-1]
    if type(last) is int:
        if type(here) is list and last < len(here) and isinstance(here[last], date):
            here[last] = _time_in(here[last], c)
    elif type(here) is dict and isinstance(here.get(last), date):
        here[last] = _time_in(here[last], c)


_DECODERS: dict[str, AvroDecoder] = {}
_LOCK = threading.Lock()


def avro_decoder_for(declaration: TopicDeclaration, registry: dict[str, Any] | None) -> AvroDecoder:
    """The decoder of ``declaration``'s Avro topic, built once per declaration and registry
    configuration; ``registry``: the schema registry client's configuration (None: not set),
    needed without a schema file. Raises ValueError when neither is given."""
    key = json.dumps([declaration.model_dump_json(), registry], sort_keys=True)
    with _LOCK:
        decoder = _DECODERS.get(key)
        if decoder is None:
            if declaration.schema_file is not None:
                body: Body = FileBody(declaration.schema_file, declaration.framing == "confluent")
            elif registry is None:
                raise ValueError(
                    f"topic {declaration.topic!r} is declared encoding: avro without a "
                    "schema_file, and no schema registry is set (SLUICE_SCHEMA_REGISTRY_URL)"
                )
            else:
                body = RegistryBody(registry)
            decoder = _DECODERS[key] = AvroDecoder(declaration, body)
        return decoder
