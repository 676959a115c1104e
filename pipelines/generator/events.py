"""The generator's events: what a message on its topic looks like (``data/topics.yaml`` declares
them for the rest of Sluice, which knows no field of its own).

Events travel as UTF-8 JSON objects, keyed by ``org`` by default so one organisation's events
share a partition (and so an event's duplicates land where the original did)::

    {"event_id": "7f1c...", "event_time": 1424987000000, "org": "org-017",
     "client": "client-0042", "bytes_tx": 5120, "session_id": "s-91a2...",
     "event_type": "download"}

``event_time`` is epoch milliseconds (UTC); it, not the time of arrival, decides windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "EVENT_FIELDS",
    "EVENT_TYPES",
    "EventField",
    "FieldKind",
]


class FieldKind(StrEnum):
    STRING = "string"
    INT = "int"


@dataclass(frozen=True)
class EventField:
    name: str
    kind: FieldKind
    doc: str

    @property
    def numeric(self) -> bool:
        return self.kind is FieldKind.INT


EVENT_FIELDS: dict[str, EventField] = {
    f.name: f
    for f in (
        EventField("event_id", FieldKind.STRING, "Unique per event; duplicates repeat it."),
        EventField("event_time", FieldKind.INT, "When it happened, epoch milliseconds UTC."),
        EventField("org", FieldKind.STRING, "Organisation (tenant); the default message key."),
        EventField("client", FieldKind.STRING, "Client device or application."),
        EventField("bytes_tx", FieldKind.INT, "Bytes transferred, >= 0."),
        EventField("session_id", FieldKind.STRING, "Session the event belongs to."),
        EventField("event_type", FieldKind.STRING, "Kind of event, e.g. view or download."),
    )
}

EVENT_TYPES = ("view", "click", "download", "upload", "error")
"""The types the generator emits; the schema accepts any non-empty string."""
