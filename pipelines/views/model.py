"""A view: which events to group, over what event-time window, and what to compute.

One definition serves the stream workers (through the aggregator registry) and the Spark
correction (through the same registry's Spark expressions).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from pipelines.aggregators import AggregationSpec, Aggregator, build
from pipelines.segments import HOUR_MS

__all__ = ["View", "format_duration"]


WINDOW_START = "window_start"
WINDOW_END = "window_end"


@dataclass(frozen=True)
class View:
    name: str
    topic: str
    grouping_cols: tuple[str, ...]
    interval_ms: int
    allowed_lateness_ms: int
    aggregations: tuple[AggregationSpec, ...]
    description: str = ""
    disabled: bool = False

    @cached_property
    def aggregators(self) -> tuple[Aggregator, ...]:
        return tuple(build(spec) for spec in self.aggregations)

    @property
    def segment_ms(self) -> int:
        """Segment granularity: an hour, or the window itself when windows are longer."""
        return max(HOUR_MS, self.interval_ms)

    def window_start(self, event_time_ms: int) -> int:
        return event_time_ms - event_time_ms % self.interval_ms

    def segment_start(self, event_time_ms: int) -> int:
        return event_time_ms - event_time_ms % self.segment_ms

    def output_schema(self) -> pa.Schema:
        """Columns a query of this view returns."""
        fields = [
            pa.field(WINDOW_START, pa.timestamp("ms", tz="UTC")),
            pa.field(WINDOW_END, pa.timestamp("ms", tz="UTC")),
        ]
        fields += [pa.field(col, pa.string()) for col in self.grouping_cols]
        for agg in self.aggregators:
            fields += agg.output_fields()
        return pa.schema(fields)

    @property
    def metric_columns(self) -> list[str]:
        return [f.name for agg in self.aggregators for f in agg.output_fields()]

    @property
    def fingerprint(self) -> str:
        """Changes whenever the windowing or any aggregation's state would change meaning."""
        parts = [self.topic, ",".join(self.grouping_cols), str(self.interval_ms)]
        parts += [f"{a.out}={a.state_key}" for a in self.aggregators]
        return "|".join(parts)


def format_duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", HOUR_MS), ("m", 60_000), ("s", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
