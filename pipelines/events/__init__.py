"""Events: the wire schema and the batch decoder (bad input becomes dead letters).

May import: third-party libraries only.
"""

from pipelines.events.decode import DeadLetter, DecodedBatch, decode_batch
from pipelines.events.schema import EVENT_FIELDS, EventField, FieldKind

__all__ = ["EVENT_FIELDS", "DeadLetter", "DecodedBatch", "EventField", "FieldKind", "decode_batch"]
