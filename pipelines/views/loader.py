"""Load and validate view definitions from YAML, with messages that point at the mistake.

Config never executes code: YAML is read with ``safe_load`` and every value is checked
against the event schema and the aggregator registry before any worker uses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from pipelines.aggregators import AggregationSpec, InputKind, get, names
from pipelines.events.schema import EVENT_FIELDS
from pipelines.exceptions import UnknownAggregation, ViewDefinitionError
from pipelines.segments import HOUR_MS
from pipelines.views.model import (
    MAX_KEPT_EVENTS_CAP,
    SESSION,
    SESSION_COLUMNS,
    VIEW_KINDS,
    WINDOW,
    WINDOW_END,
    WINDOW_START,
    SessionSpec,
    View,
    format_duration,
)

__all__ = ["load_views", "parse_duration", "parse_views"]

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": HOUR_MS, "d": 86_400_000}
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_VIEW_KEYS = {
    "name",
    "topic",
    "grouping_cols",
    "interval",
    "allowed_lateness",
    "aggregation_info",
    "description",
    "disabled",
    "kind",
}
_SESSION_KEYS = {
    "name",
    "kind",
    "topic",
    "session_key",
    "gap",
    "max_duration",
    "kept_fields",
    "max_kept_events",
    "allowed_lateness",
    "aggregation_info",
    "description",
    "disabled",
}
MAX_SESSION_MS = 86_400_000
"""The longest ``max_duration``: a day, so an open session's state stays bounded."""
_AGG_KEYS = {"aggregation", "col_name", "aggregated_col_name", "params"}
DAY_MS = 86_400_000


def parse_duration(text: Any, where: str) -> int:
    """``"10m"`` -> 600000 ms; the error names ``where`` and the bad value."""
    match = _DURATION.match(str(text)) if isinstance(text, str | int) else None
    if not match:
        raise ViewDefinitionError(
            f"{where}: bad duration {text!r}; use a number and a unit, e.g. 30s, 10m, 1h, 1d"
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def load_views(path: str | Path) -> list[View]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ViewDefinitionError(f"cannot read view definitions {path}: {exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ViewDefinitionError(f"{path}: not valid YAML: {exc}") from exc
    return parse_views(document, source=str(path))


def parse_views(document: Any, source: str = "views") -> list[View]:
    if isinstance(document, Mapping):
        document = document.get("views")
    if not isinstance(document, list) or not document:
        raise ViewDefinitionError(f"{source}: expected a non-empty list under 'views:'")
    views: list[View] = []
    seen: set[str] = set()
    for index, raw in enumerate(document):
        view = _parse_view(raw, f"{source}: views[{index}]")
        if view.name in seen:
            raise ViewDefinitionError(f"{source}: duplicate view name {view.name!r}")
        seen.add(view.name)
        views.append(view)
    return views


def _parse_view(raw: Any, where: str) -> View:
    if not isinstance(raw, Mapping):
        raise ViewDefinitionError(f"{where}: expected a mapping, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ViewDefinitionError(
            f"{where}.name: {name!r} must be lower-case letters, digits and _, starting with a letter"
        )
    where = f"{where} ({name})"
    kind = raw.get("kind", WINDOW)
    if kind not in VIEW_KINDS:
        raise ViewDefinitionError(
            f"{where}.kind: {kind!r} is not a view kind (kinds: {', '.join(VIEW_KINDS)})"
        )
    if kind == SESSION:
        return _parse_session_view(raw, name, where)
    _reject_unknown(raw, _VIEW_KEYS, where)
    topic = _topic(raw, where)
    grouping = raw.get("grouping_cols", [])
    if not isinstance(grouping, list) or not all(isinstance(c, str) for c in grouping):
        raise ViewDefinitionError(f"{where}.grouping_cols: expected a list of column names")
    for col in grouping:
        if col not in EVENT_FIELDS or col == "event_time":
            raise ViewDefinitionError(
                f"{where}.grouping_cols: unknown column {col!r} "
                f"(event columns: {', '.join(c for c in EVENT_FIELDS if c != 'event_time')})"
            )
    if len(set(grouping)) != len(grouping):
        raise ViewDefinitionError(f"{where}.grouping_cols: {grouping} repeats a column")
    interval = parse_duration(raw.get("interval"), f"{where}.interval")
    _check_interval(interval, f"{where}.interval")
    lateness = parse_duration(raw.get("allowed_lateness", "1m"), f"{where}.allowed_lateness")
    specs = _aggregations(raw, where)
    view = View(
        name=name,
        topic=topic,
        grouping_cols=tuple(grouping),
        interval_ms=interval,
        allowed_lateness_ms=lateness,
        aggregations=tuple(specs),
        description=str(raw.get("description", "")),
        disabled=bool(raw.get("disabled", False)),
    )
    _check_output_names(view, where)
    return view


def _topic(raw: Mapping, where: str) -> str:
    topic = raw.get("topic")
    if not isinstance(topic, str) or not topic:
        raise ViewDefinitionError(f"{where}.topic: a topic name is required")
    return topic


def _aggregations(raw: Mapping, where: str) -> tuple[AggregationSpec, ...]:
    infos = raw.get("aggregation_info")
    if not isinstance(infos, list) or not infos:
        raise ViewDefinitionError(f"{where}.aggregation_info: expected a non-empty list")
    return tuple(
        _parse_aggregation(info, f"{where}.aggregation_info[{i}]") for i, info in enumerate(infos)
    )


def _parse_session_view(raw: Mapping, name: str, where: str) -> View:
    """``kind: session``: the session key, gap, maximum duration and kept fields, checked."""
    for key, why in (
        ("interval", "sessions end by gap and max_duration, not by a fixed interval"),
        ("grouping_cols", "a session view groups by its session_key"),
    ):
        if key in raw:
            raise ViewDefinitionError(f"{where}.{key}: not for kind: session ({why})")
    _reject_unknown(raw, _SESSION_KEYS, where)
    topic = _topic(raw, where)
    key = raw.get("session_key", "session_id")
    strings = [c for c, f in EVENT_FIELDS.items() if not f.numeric]
    if key not in strings:
        raise ViewDefinitionError(
            f"{where}.session_key: {key!r} is not a string event column (use one of: "
            f"{', '.join(strings)})"
        )
    gap = parse_duration(raw.get("gap", "30m"), f"{where}.gap")
    max_duration = parse_duration(raw.get("max_duration", "4h"), f"{where}.max_duration")
    for label, value in (("gap", gap), ("max_duration", max_duration)):
        if value < 1000 or value % 1000:
            raise ViewDefinitionError(
                f"{where}.{label}: {value} ms; use whole seconds, at least 1s"
            )
    if max_duration < gap:
        raise ViewDefinitionError(
            f"{where}.max_duration: {format_duration(max_duration)} is shorter than the gap "
            f"{format_duration(gap)}"
        )
    if max_duration > MAX_SESSION_MS:
        raise ViewDefinitionError(
            f"{where}.max_duration: {format_duration(max_duration)} is longer than 1d, the longest "
            "a session may stay open"
        )
    kept = raw.get("kept_fields", [])
    if not isinstance(kept, list) or not all(isinstance(c, str) for c in kept):
        raise ViewDefinitionError(f"{where}.kept_fields: expected a list of column names")
    for col in kept:
        if col not in EVENT_FIELDS or col == "event_time":
            raise ViewDefinitionError(
                f"{where}.kept_fields: unknown column {col!r} (event columns: "
                f"{', '.join(c for c in EVENT_FIELDS if c != 'event_time')}; the event time is "
                "always kept)"
            )
    if len(set(kept)) != len(kept):
        raise ViewDefinitionError(f"{where}.kept_fields: {kept} repeats a column")
    cap = raw.get("max_kept_events", 100)
    if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= MAX_KEPT_EVENTS_CAP:
        raise ViewDefinitionError(
            f"{where}.max_kept_events: {cap!r} must be an integer in [1, {MAX_KEPT_EVENTS_CAP}]"
        )
    lateness = parse_duration(raw.get("allowed_lateness", "1m"), f"{where}.allowed_lateness")
    view = View(
        name=name,
        topic=topic,
        grouping_cols=(),
        interval_ms=0,
        allowed_lateness_ms=lateness,
        aggregations=_aggregations(raw, where),
        description=str(raw.get("description", "")),
        disabled=bool(raw.get("disabled", False)),
        session=SessionSpec(key, gap, max_duration, tuple(kept), cap),
    )
    _check_output_names(view, where)
    return view


def _check_interval(interval: int, where: str) -> None:
    if interval < 1000 or interval % 1000:
        raise ViewDefinitionError(f"{where}: {interval} ms; windows are whole seconds, at least 1s")
    if interval <= HOUR_MS and HOUR_MS % interval:
        raise ViewDefinitionError(f"{where}: {interval // 1000}s does not divide an hour")
    if interval > HOUR_MS and (interval % HOUR_MS or DAY_MS % interval):
        raise ViewDefinitionError(
            f"{where}: windows longer than an hour must be whole hours that divide a day"
        )


def _parse_aggregation(info: Any, where: str) -> AggregationSpec:
    if not isinstance(info, Mapping):
        raise ViewDefinitionError(f"{where}: expected a mapping, got {type(info).__name__}")
    _reject_unknown(info, _AGG_KEYS, where)
    name = info.get("aggregation")
    try:
        cls = get(str(name))
    except UnknownAggregation as exc:
        raise UnknownAggregation(f"{where}.aggregation: {exc}") from None
    col = info.get("col_name")
    kind = None
    if cls.input_kind == InputKind.NONE:
        if col is not None and col not in EVENT_FIELDS:
            raise ViewDefinitionError(f"{where}.col_name: unknown column {col!r}")
    else:
        if col is None:
            raise ViewDefinitionError(f"{where}.col_name: {name} needs a column")
        if col not in EVENT_FIELDS:
            raise ViewDefinitionError(
                f"{where}.col_name: unknown column {col!r} (event columns: {', '.join(EVENT_FIELDS)})"
            )
        if cls.input_kind == InputKind.NUMERIC and not EVENT_FIELDS[col].numeric:
            numeric = [c for c, f in EVENT_FIELDS.items() if f.numeric]
            raise ViewDefinitionError(
                f"{where}.col_name: {name} needs a numeric column, {col!r} is a string "
                f"(numeric: {', '.join(numeric)})"
            )
        kind = EVENT_FIELDS[col].kind.value
    out = info.get("aggregated_col_name")
    if not isinstance(out, str) or not _NAME.match(out):
        raise ViewDefinitionError(
            f"{where}.aggregated_col_name: {out!r} must be lower-case letters, digits and _"
        )
    params = info.get("params") or {}
    if not isinstance(params, Mapping):
        raise ViewDefinitionError(f"{where}.params: expected a mapping")
    for key, value in params.items():
        expected = cls.params_schema.get(key)
        if expected is None:
            allowed = ", ".join(cls.params_schema) or "none"
            raise ViewDefinitionError(
                f"{where}.params: {name} has no parameter {key!r} (has: {allowed})"
            )
        if not isinstance(value, expected) or isinstance(value, bool):
            raise ViewDefinitionError(
                f"{where}.params.{key}: expected {expected.__name__}, got {value!r}"
            )
    _check_params(name, dict(params), where)
    return AggregationSpec(str(name), col, out, dict(params), kind)


def _check_params(name: str, params: dict[str, Any], where: str) -> None:
    quantiles = params.get("quantiles")
    if quantiles is not None and (
        not quantiles or not all(isinstance(q, int | float) and 0 <= q <= 1 for q in quantiles)
    ):
        raise ViewDefinitionError(
            f"{where}.params.quantiles: {quantiles!r} must be numbers in [0, 1]"
        )
    for key, low, high in (("lg_k", 4, 21), ("k", 1, 65535), ("lg_max_map_size", 3, 24)):
        value = params.get(key)
        if value is not None and not low <= value <= high:
            raise ViewDefinitionError(f"{where}.params.{key}: {value} outside [{low}, {high}]")


def _check_output_names(view: View, where: str) -> None:
    if view.session is not None:
        taken = {view.session.key, *SESSION_COLUMNS}
    else:
        taken = {WINDOW_START, WINDOW_END, *view.grouping_cols}
    for column in view.metric_columns:
        if column in taken:
            raise ViewDefinitionError(f"{where}: output column {column!r} is defined twice")
        taken.add(column)


def _reject_unknown(raw: Mapping, allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ViewDefinitionError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: {', '.join(sorted(allowed))})"
        )


def known_aggregations() -> list[str]:
    return names()
