"""View definitions as written in ``views.yaml``: pydantic models, checked against the event
schema and the aggregator registry, that build the frozen :class:`~pipelines.views.model.View`.

Models rather than hand-written checks so that every mistake of a file is found in one pass
(pydantic collects them all) and the same models print the JSON Schema editors validate with
(:mod:`pipelines.views.schema`). A view is a tagged union on ``kind``: ``window`` (the default
when ``kind`` is absent) or ``session``. Unknown keys are refused (``extra="forbid"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from pipelines.events.declaration import TopicDeclaration
from pipelines.segments import HOUR_MS
from pipelines.views.aggregation_info import Aggregations
from pipelines.views.fields import (
    DefinitionModel,
    DurationMs,
    GroupColumns,
    KeptColumns,
    KeptEventsCap,
    SessionKey,
    Switch,
    Text,
    Topic,
    ViewName,
    WhereText,
    problem,
    start_view,
)
from pipelines.views.model import (
    SESSION,
    VIEW_KINDS,
    WINDOW,
    SessionSpec,
    View,
    format_duration,
)
from pipelines.views.topics import declaration_for

__all__ = [
    "VIEW_MODELS",
    "SessionViewDefinition",
    "ViewDefinition",
    "ViewsFile",
    "WindowViewDefinition",
    "allowed_keys",
]

DAY_MS = 86_400_000
MAX_SESSION_MS = DAY_MS
MAX_WINDOWS_PER_EVENT = 60
"""The most sliding windows one event may fall in (interval / slide): each costs a merge of
the window's panes per flush (docs/aggregations.md, memory and cost)."""
"""The longest ``max_duration``: a day, so an open session's state stays bounded."""
LATENESS = Field(
    default="1m",
    validate_default=True,
    description="How far behind the watermark an event may arrive and still count.",
)


def _check_output_names(view: View) -> None:
    """No metric may reuse a key, bound or session column, nor another metric's name."""
    taken = set(view.own_columns)
    for column in view.metric_columns:
        if column in taken:
            raise problem(f"output column {column!r} is defined twice")
        taken.add(column)


class _ViewDefinition(DefinitionModel):
    """What both kinds of view check once their fields are valid."""

    def to_view(self, declaration: TopicDeclaration | None = None) -> View:
        """The view, reading its topic with ``declaration`` (None: only while checking)."""
        raise NotImplementedError

    @model_validator(mode="before")
    @classmethod
    def _own_topic(cls, data: Any, info: ValidationInfo) -> Any:
        start_view(info)
        return data

    @model_validator(mode="after")
    def _distinct_outputs(self) -> _ViewDefinition:
        _check_output_names(self.to_view())
        return self


class WindowViewDefinition(_ViewDefinition):
    """``kind: window``: per group, fixed event-time windows of ``interval``."""

    name: ViewName = Field(description="The view's name: lower-case letters, digits and _.")
    kind: Literal["window"] = Field(
        default=WINDOW, description="window (the default): fixed event-time windows per group."
    )
    topic: Topic = Field(description="The Kafka topic the view reads.")
    grouping_cols: GroupColumns = Field(
        default=(), description="Event columns to group by (any but event_time)."
    )
    interval: DurationMs = Field(
        description="The window: whole seconds dividing an hour, or whole hours dividing a day."
    )
    slide: DurationMs | None = Field(
        default=None,
        description="Sliding (hopping) windows: a window of interval starts every slide "
        "(whole seconds dividing the interval, at most 60 windows per event). Default: "
        "tumbling windows.",
    )
    where: WhereText | None = Field(
        default=None,
        description="Only events this filter keeps belong to the view, e.g. "
        "\"event_type = 'error'\" (comparisons, in, and/or/not, is null).",
    )
    allowed_lateness: DurationMs = LATENESS
    aggregation_info: Aggregations
    description: Text = Field(default="", description="What the view is for.")
    disabled: Switch = Field(default=False, description="Defined but run by no worker.")

    @field_validator("interval")
    @classmethod
    def _whole_windows(cls, interval: int) -> int:
        if interval < 1000 or interval % 1000:
            raise problem(f"{interval} ms; windows are whole seconds, at least 1s")
        if interval <= HOUR_MS and HOUR_MS % interval:
            raise problem(f"{interval // 1000}s does not divide an hour")
        if interval > HOUR_MS and (interval % HOUR_MS or DAY_MS % interval):
            raise problem("windows longer than an hour must be whole hours that divide a day")
        return interval

    @field_validator("slide")
    @classmethod
    def _slide_divides(cls, slide: int | None, info: ValidationInfo) -> int | None:
        interval = info.data.get("interval")
        if slide is None or interval is None:
            return slide
        if slide < 1000 or slide % 1000:
            raise problem(f"{slide} ms; a slide is whole seconds, at least 1s")
        if slide > interval or interval % slide:
            raise problem(
                f"{format_duration(slide)} does not divide the interval {format_duration(interval)}"
            )
        if interval // slide > MAX_WINDOWS_PER_EVENT:
            raise problem(
                f"{interval // slide} windows per event; at most {MAX_WINDOWS_PER_EVENT} "
                "(a longer slide, or a shorter interval)"
            )
        return slide

    def to_view(self, declaration: TopicDeclaration | None = None) -> View:
        columns = None if declaration is None else declaration.columns()
        nullable = () if declaration is None else declaration.nullable_columns()
        return View(
            name=self.name,
            topic=self.topic,
            grouping_cols=tuple(self.grouping_cols),
            interval_ms=self.interval,
            slide_ms=0 if self.slide in (None, self.interval) else self.slide,
            allowed_lateness_ms=self.allowed_lateness,
            aggregations=tuple(a.to_spec(columns, nullable) for a in self.aggregation_info),
            description=self.description,
            disabled=self.disabled,
            where=self.where,
            declaration=declaration,
        )


class SessionViewDefinition(_ViewDefinition):
    """``kind: session``: per session key, runs of events cut by ``gap`` and ``max_duration``."""

    NOT_FOR_SESSION: ClassVar[dict[str, str]] = {
        "interval": "sessions end by gap and max_duration, not by a fixed interval",
        "grouping_cols": "a session view groups by its session_key",
    }

    name: ViewName = Field(description="The view's name: lower-case letters, digits and _.")
    kind: Literal["session"] = Field(
        description="session: per session key, events cut into sessions by inactivity."
    )
    interval: SkipJsonSchema[Any] = None
    grouping_cols: SkipJsonSchema[Any] = None
    topic: Topic = Field(description="The Kafka topic the view reads.")
    session_key: SessionKey = Field(
        default="session_id", description="The string event column sessions are cut by."
    )
    gap: DurationMs = Field(
        default="30m",
        validate_default=True,
        description="A session ends after this long without an event (whole seconds).",
    )
    max_duration: DurationMs = Field(
        default="4h",
        validate_default=True,
        description="A session is cut this long after its first event: at least the gap, "
        "at most 1d.",
    )
    kept_fields: KeptColumns = Field(
        default=(), description="Event columns kept per event (with its event time)."
    )
    max_kept_events: KeptEventsCap = Field(
        default=100, description="Events kept per session; the rest are only counted."
    )
    where: WhereText | None = Field(
        default=None,
        description="Only events this filter keeps belong to the view, e.g. "
        "\"event_type = 'error'\" (comparisons, in, and/or/not, is null).",
    )
    allowed_lateness: DurationMs = LATENESS
    aggregation_info: Aggregations
    description: Text = Field(default="", description="What the view is for.")
    disabled: Switch = Field(default=False, description="Defined but run by no worker.")

    @field_validator("interval", "grouping_cols", mode="before")
    @classmethod
    def _not_for_session(cls, value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        raise problem(f"not for kind: session ({cls.NOT_FOR_SESSION[info.field_name]})")

    @field_validator("gap", "max_duration")
    @classmethod
    def _whole_seconds(cls, value: int) -> int:
        if value < 1000 or value % 1000:
            raise problem(f"{value} ms; use whole seconds, at least 1s")
        return value

    @field_validator("max_duration")
    @classmethod
    def _bounded(cls, value: int, info: ValidationInfo) -> int:
        gap = info.data.get("gap")
        if gap is not None and value < gap:
            raise problem(
                f"{format_duration(value)} is shorter than the gap {format_duration(gap)}"
            )
        if value > MAX_SESSION_MS:
            raise problem(
                f"{format_duration(value)} is longer than 1d, the longest a session may stay open"
            )
        return value

    def to_view(self, declaration: TopicDeclaration | None = None) -> View:
        columns = None if declaration is None else declaration.columns()
        nullable = () if declaration is None else declaration.nullable_columns()
        return View(
            name=self.name,
            topic=self.topic,
            grouping_cols=(),
            interval_ms=0,
            allowed_lateness_ms=self.allowed_lateness,
            aggregations=tuple(a.to_spec(columns, nullable) for a in self.aggregation_info),
            description=self.description,
            disabled=self.disabled,
            where=self.where,
            session=SessionSpec(
                self.session_key,
                self.gap,
                self.max_duration,
                tuple(self.kept_fields),
                self.max_kept_events,
            ),
            declaration=declaration,
        )


def _kind_of(raw: Any) -> str | None:
    """The union's tag: ``kind``, ``window`` when absent (anything not a mapping is tried as a
    window view, whose error then says a mapping was expected)."""
    if isinstance(raw, BaseModel):
        return getattr(raw, "kind", None)
    if not isinstance(raw, Mapping):
        return WINDOW
    kind = raw.get("kind", WINDOW)
    return kind if isinstance(kind, str) else None


ViewDefinition = Annotated[
    Annotated[WindowViewDefinition, Tag(WINDOW)] | Annotated[SessionViewDefinition, Tag(SESSION)],
    Discriminator(_kind_of),
]
"""A view of either kind; the tags are :data:`~pipelines.views.model.VIEW_KINDS`."""
assert {WINDOW, SESSION} == set(VIEW_KINDS)

VIEW_MODELS: dict[str, type[WindowViewDefinition] | type[SessionViewDefinition]] = {
    WINDOW: WindowViewDefinition,
    SESSION: SessionViewDefinition,
}


class ViewsFile(BaseModel):
    """A views file: ``views:``, a list of view definitions, and ``topics:``, the declarations of
    the topics they read that the topics file does not declare (other top-level keys, e.g. YAML
    anchors, are ignored)."""

    model_config = ConfigDict(
        title="Sluice views",
        json_schema_extra={"description": "View definitions for Sluice (SLUICE_VIEWS_FILE)."},
    )

    views: list[ViewDefinition] = Field(min_length=1, description="The views, at least one.")
    topics: list[TopicDeclaration] = Field(
        default_factory=list,
        description="Declarations of the topics the views read (docs/events.md); a topic "
        "declared here wins over the topics file's (SLUICE_TOPICS_FILE).",
    )

    def to_views(self, declarations: Mapping[str, TopicDeclaration]) -> list[View]:
        """The views, each with its topic's declaration (:func:`~pipelines.views.topics
        .declaration_for`)."""
        return [v.to_view(declaration_for(v.topic, declarations)) for v in self.views]


def allowed_keys(model: type[BaseModel]) -> list[str]:
    """The keys a mapping of ``model`` may have, as the unknown-key message lists them."""
    skipped = getattr(model, "NOT_FOR_SESSION", {})
    return sorted(k for k in model.model_fields if k not in skipped)
