"""A view: which events to group, over what event-time window, and what to compute.

A view is windowed (``kind: window``: fixed windows per group) or a session view (``kind:
session``: per session key, runs of events no further apart than an inactivity gap and no
longer than a maximum duration). One definition serves the stream workers (through the
aggregator registry) and the Spark correction (through the same registry's Spark expressions).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from pipelines.aggregators import AggregationSpec, Aggregator, build
from pipelines.events.declaration import TopicDeclaration
from pipelines.expressions import Filter, parse_filter
from pipelines.expressions.derived import Derived, used_derived
from pipelines.segments import HOUR_MS

__all__ = ["SESSION_COLUMNS", "SessionSpec", "View", "declaration_digest", "format_duration"]


WINDOW_START = "window_start"
WINDOW_END = "window_end"

WINDOW = "window"
SESSION = "session"
VIEW_KINDS = (WINDOW, SESSION)

SESSION_START = "session_start"
SESSION_END = "session_end"
EVENT_COUNT = "event_count"
OPEN = "open"
KEPT_EVENTS = "kept_events"
KEPT_DROPPED = "kept_dropped"
SESSION_COLUMNS = (SESSION_START, SESSION_END, EVENT_COUNT, OPEN, KEPT_EVENTS, KEPT_DROPPED)
"""Columns every session row has besides its key and its aggregations."""

MAX_KEPT_EVENTS_CAP = 1000
"""The most events a session view may keep per session (``max_kept_events``)."""


@dataclass(frozen=True)
class SessionSpec:
    """How a session view cuts a key's events into sessions.

    In event-time order, an event joins its key's current session if it comes less than
    ``gap_ms`` after the session's last event and less than ``max_duration_ms`` after its
    first; otherwise it starts a new session. A session keeps ``kept_fields`` (plus the event
    time) of its first ``max_kept_events`` events in event-time order and counts the rest in
    ``kept_dropped``.
    """

    key: str = "session_id"
    gap_ms: int = 30 * 60_000
    max_duration_ms: int = 4 * HOUR_MS
    kept_fields: tuple[str, ...] = ()
    max_kept_events: int = 100

    @cached_property
    def fingerprint(self) -> str:
        kept = ",".join(self.kept_fields)
        return f"{self.key}/{self.gap_ms}/{self.max_duration_ms}/{kept}/{self.max_kept_events}"


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
    session: SessionSpec | None = None
    """Set for session views (``kind: session``); their ``interval_ms`` is 0."""
    where: str | None = None
    """The view's filter (``where:``): only events it keeps belong to the view."""
    slide_ms: int = 0
    """Sliding (hopping) windows: a window of ``interval_ms`` starts every ``slide_ms``
    (0: tumbling windows, one per interval)."""
    declaration: TopicDeclaration | None = field(default=None, compare=False)
    """How the view's topic's messages read (its columns, event time, id); every loader fills
    it (:mod:`pipelines.views.topics`)."""

    @property
    def is_sliding(self) -> bool:
        return 0 < self.slide_ms < self.interval_ms

    @property
    def step_ms(self) -> int:
        """How far apart window starts are: the slide, or the interval for tumbling windows.
        It is also the stream's pane: an event's panes of ``step_ms`` build every window."""
        return self.slide_ms if self.is_sliding else self.interval_ms

    @property
    def windows_per_event(self) -> int:
        """How many windows each event belongs to (interval / slide; 1 when tumbling)."""
        return self.interval_ms // self.step_ms if self.interval_ms else 1

    @property
    def reach_ms(self) -> int:
        """How far past its start a segment's last window ends beyond the segment itself:
        ``interval - slide`` for sliding windows, 0 otherwise."""
        return self.interval_ms - self.step_ms if self.is_sliding else 0

    @cached_property
    def filter(self) -> Filter | None:
        if self.where is None:
            return None
        columns = None if self.declaration is None else self.declaration.columns()
        return parse_filter(self.where, columns)

    @property
    def kind(self) -> str:
        return WINDOW if self.session is None else SESSION

    @property
    def is_session(self) -> bool:
        return self.session is not None

    @cached_property
    def aggregators(self) -> tuple[Aggregator, ...]:
        return tuple(build(spec) for spec in self.aggregations)

    @property
    def segment_ms(self) -> int:
        """Segment granularity: an hour, or the window itself when windows are longer.

        A session lives in the segment of the hour it started in."""
        return max(HOUR_MS, self.interval_ms)

    def window_start(self, event_time_ms: int) -> int:
        """The start of the last window holding the event (its only one when tumbling)."""
        return event_time_ms - event_time_ms % self.step_ms

    def segment_start(self, event_time_ms: int) -> int:
        return event_time_ms - event_time_ms % self.segment_ms

    def output_schema(self) -> pa.Schema:
        """Columns a query of this view returns: the row's own columns, then the metrics."""
        fields = self._row_fields()
        for agg in self.aggregators:
            fields += agg.output_fields()
        return pa.schema(fields)

    @property
    def own_columns(self) -> list[str]:
        """The columns every row has besides its metrics: its bounds and groups, or its
        session key, bounds and summary."""
        return [f.name for f in self._row_fields()]

    def _row_fields(self) -> list[pa.Field]:
        if self.session is not None:
            return self.session_fields(pa.timestamp("ms", tz="UTC"))
        fields = [
            pa.field(WINDOW_START, pa.timestamp("ms", tz="UTC")),
            pa.field(WINDOW_END, pa.timestamp("ms", tz="UTC")),
        ]
        return fields + [pa.field(col, pa.string()) for col in self.grouping_cols]

    def session_fields(self, time_type: pa.DataType) -> list[pa.Field]:
        """A session row's own columns, before its metrics: the key, its bounds (as
        ``time_type``: timestamps in queries, epoch ms in segment files), counts and kept
        events."""
        assert self.session is not None
        return [
            pa.field(self.session.key, pa.string()),
            pa.field(SESSION_START, time_type),
            pa.field(SESSION_END, time_type),
            pa.field(EVENT_COUNT, pa.int64()),
            pa.field(OPEN, pa.bool_()),
            pa.field(KEPT_EVENTS, pa.string()),
            pa.field(KEPT_DROPPED, pa.int64()),
        ]

    @property
    def key_columns(self) -> list[str]:
        """What identifies a row: (window_start, *groups) or (session key, session_start)."""
        if self.session is not None:
            return [self.session.key, SESSION_START]
        return [WINDOW_START, *self.grouping_cols]

    @property
    def metric_columns(self) -> list[str]:
        return [f.name for agg in self.aggregators for f in agg.output_fields()]

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever the windowing, any aggregation's state or the topic's declaration
        (how its messages read) would change meaning: a declaration change redeploys every
        view of the topic."""
        parts = [self.topic, ",".join(self.grouping_cols), str(self.interval_ms)]
        if self.session is not None:
            parts.append(f"session:{self.session.fingerprint}")
        if self.where is not None:
            parts.append(f"where:{self.where}")
        if self.is_sliding:
            parts.append(f"slide:{self.slide_ms}")
        parts += [f"{a.out}={a.state_key}" for a in self.aggregators]
        parts += [f"derived:{d.name}={d.text}" for d in self._derived_read()]
        if self.declaration is not None:
            parts.append(f"declared:{declaration_digest(self.declaration)}")
        return "|".join(parts)

    def _derived_read(self) -> list[Derived]:
        """The topic's derived columns this view reads: a changed expression changes what the
        view's state means."""
        if self.declaration is None or not self.declaration.derived:
            return []
        read = {*self.grouping_cols, *(self.filter.fields if self.filter else ())}
        read |= {c for a in self.aggregators for c in a.columns_read()}
        if self.session is not None:
            read |= {self.session.key, *self.session.kept_fields}
        return used_derived(self.declaration.derived_columns(), read)


def declaration_digest(declaration: TopicDeclaration) -> str:
    """A short digest of what decides how ``declaration``'s messages read (its descriptions
    and the fields' docs left out: rewording them changes nothing; so are the derived columns,
    which change the fingerprint of the views that read them only)."""
    meaning = declaration.model_dump(
        mode="json",
        exclude={"description": True, "derived": True, "fields": {"__all__": {"doc"}}},
    )
    text = json.dumps(meaning, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def format_duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", HOUR_MS), ("m", 60_000), ("s", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
