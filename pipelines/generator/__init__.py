"""The trace-driven event generator."""

from pipelines.generator.replay import replay
from pipelines.generator.synth import (
    MALFORMED_KINDS,
    GeneratorOptions,
    GeneratorReport,
    Message,
    synthesize,
)
from pipelines.generator.trace import TRACES_DIR, Trace, TraceError, load_trace, resolve_trace

__all__ = [
    "MALFORMED_KINDS",
    "TRACES_DIR",
    "GeneratorOptions",
    "GeneratorReport",
    "Message",
    "Trace",
    "TraceError",
    "load_trace",
    "replay",
    "resolve_trace",
    "synthesize",
]
