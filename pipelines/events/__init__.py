"""Events: a topic's declaration and the decoders built from it (bad input becomes dead letters).

May import: ``pipelines.exceptions``, ``pipelines.expressions``.
"""

from pipelines.events.decode import DeadLetter, DecodedBatch, RecordBatch

__all__ = ["DeadLetter", "DecodedBatch", "RecordBatch"]
