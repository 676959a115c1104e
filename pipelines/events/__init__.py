"""Events: the wire schema, the batch decoder and the trace-driven generator."""

from pipelines.events.decode import DeadLetter, DecodedBatch, decode_batch
from pipelines.events.schema import EVENT_FIELDS, EventField, FieldKind

__all__ = ["EVENT_FIELDS", "DeadLetter", "DecodedBatch", "EventField", "FieldKind", "decode_batch"]
