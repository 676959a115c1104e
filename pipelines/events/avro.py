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
from typing import Any

import fastavro
from confluent_kafka.schema_registry.avro import AvroDeserializer

from pipelines.events.avro_fields import read_schema_file
from pipelines.events.declaration import ColumnType, TimeFormat, TopicDeclaration
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
from pipelines.events.readings import Reading
from pipelines.events.registry import is_not_found, registry_client, unreachable
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

    def classify(
        self, value: bytes | None, max_message_bytes: int, stamp: int = 0
    ) -> tuple[str, str] | dict[str, Any]:
        """Why a message is bad as (reason, detail), or its columns' values; raises only
        :class:`SchemaRegistryUnreachable`."""
        try:
            return self._avro(value, max_message_bytes, stamp)
        except SchemaRegistryUnreachable:
            raise
        except Exception as exc:  # a bug, not the input's fault: the message is accounted for
            return DECODER_ERROR, _said(exc)[:500]

    def _avro(
        self, value: bytes | None, max_message_bytes: int, stamp: int
    ) -> tuple[str, str] | dict[str, Any]:
        if value is None:
            return EMPTY, "message has no value"
        if len(value) > max_message_bytes:
            return OVERSIZE, f"{len(value)} bytes > max_message_bytes {max_message_bytes}"
        record, where, *bad = self.body(value)
        if bad:
            return record, where
        if type(record) is not dict:
            return NOT_AN_OBJECT, f"{where}: expected a record, got {type(record).__name__}"
        for c in self._times:
            _times_to_format(record, c)
        checked = self.read(record, stamp)
        if type(checked) is tuple:
            reason, detail = checked
            return reason, f"{detail} ({where})"
        return checked

    def _decode_values(
        self, records: RecordBatch, max_message_bytes: int, slow: list[int]
    ) -> list[Any]:
        """Every message by the readings (Avro has no msgspec fast path): each one's values
        or (reason, detail), all of them in ``slow``."""
        classify = self.classify
        out = [
            classify(value, max_message_bytes, stamp)
            for value, stamp in zip(records.values, records.timestamps, strict=True)
        ]
        slow.extend(range(len(out)))
        return out


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
