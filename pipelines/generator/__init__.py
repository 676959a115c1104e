"""The trace-driven event generator, and the one trace loader the simulator replays too.

May import: ``pipelines.config``, ``pipelines.events``, ``pipelines.exceptions``.
"""

from pipelines.generator.replay import replay
from pipelines.generator.synth import (
    MALFORMED_KINDS,
    GeneratorOptions,
    GeneratorReport,
    Message,
    synthesize,
)
from pipelines.generator.trace import (
    TRACES_DIR,
    InvalidTraceParameter,
    Trace,
    TraceError,
    TraceFormatError,
    TraceNotFound,
    load_trace,
    resolve_trace,
    shipped_traces,
)

__all__ = [
    "MALFORMED_KINDS",
    "TRACES_DIR",
    "GeneratorOptions",
    "GeneratorReport",
    "InvalidTraceParameter",
    "Message",
    "Trace",
    "TraceError",
    "TraceFormatError",
    "TraceNotFound",
    "load_trace",
    "replay",
    "resolve_trace",
    "shipped_traces",
    "synthesize",
]
