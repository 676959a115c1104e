"""The schema registry, through confluent-kafka's own client: what an Avro topic's schema ids
and its subject's latest schema are.

The client is built from the settings' one converter
(:meth:`~pipelines.config.SluiceSettings.schema_registry_conf`), once per configuration and
process, so its cache of schemas by id is shared by every task that reads Avro. A registry that
answers "not found" says the message's schema is unknown; one that does not answer (or answers
a server error) raises :class:`~pipelines.exceptions.SchemaRegistryUnreachable`: nothing is
known about the message yet.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from pipelines.exceptions import SchemaRegistryUnreachable

__all__ = ["is_not_found", "latest_schema", "registry_client", "value_subject"]

_CLIENTS: dict[str, SchemaRegistryClient] = {}
_LOCK = threading.Lock()


def registry_client(conf: dict[str, Any]) -> SchemaRegistryClient:
    """The client of ``conf`` (one per configuration in a process)."""
    key = json.dumps(conf, sort_keys=True)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = SchemaRegistryClient({**conf, "max.retries": 1})
        return client


def value_subject(topic: str) -> str:
    """The subject of a topic's message values (the serializers' default naming)."""
    return f"{topic}-value"


def is_not_found(exc: BaseException) -> bool:
    """Whether the registry answered that what was asked for does not exist."""
    return isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404


def unreachable(exc: BaseException, what: str) -> SchemaRegistryUnreachable:
    """``exc`` (a client's failure other than "not found") as the error a caller retries;
    its message names what was asked, never the credentials."""
    if isinstance(exc, SchemaRegistryError):
        return SchemaRegistryUnreachable(f"schema registry: {what}: {exc}")
    return SchemaRegistryUnreachable(f"schema registry: {what}: {type(exc).__name__}")


def latest_schema(conf: dict[str, Any], topic: str) -> tuple[int, dict[str, Any]]:
    """The latest schema of ``topic``'s values (subject ``<topic>-value``) and its id; raises
    ValueError when the registry has none, :class:`SchemaRegistryUnreachable` when it does
    not answer."""
    subject = value_subject(topic)
    try:  # a client of its own: the shared one would answer the version it cached first
        registered = SchemaRegistryClient({**conf, "max.retries": 1}).get_latest_version(subject)
    except Exception as exc:
        if is_not_found(exc):
            raise ValueError(f"the schema registry has no subject {subject!r}") from None
        raise unreachable(exc, f"latest version of {subject!r}") from None
    text = registered.schema.schema_str or ""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"subject {subject!r}: not an Avro schema: {exc}") from None
    if registered.schema.schema_type not in (None, "AVRO") or not isinstance(schema, dict):
        raise ValueError(f"subject {subject!r}: its latest schema is not an Avro record")
    return int(registered.schema_id or 0), schema
