"""Session view definitions: defaults, what is checked, and the message each mistake gets."""

from __future__ import annotations

import pytest

from pipelines.exceptions import UnknownAggregation, ViewDefinitionError
from pipelines.views import SESSION_COLUMNS, parse_views


def _session(**overrides):
    view = {
        "name": "s",
        "kind": "session",
        "topic": "events",
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
    }
    view.update(overrides)
    return {"views": [view]}


def test_defaults_follow_the_documentation():
    (view,) = parse_views(_session())
    assert view.kind == "session" and view.is_session
    assert view.session.key == "session_id"
    assert view.session.gap_ms == 30 * 60_000
    assert view.session.max_duration_ms == 4 * 3_600_000
    assert view.session.kept_fields == ()
    assert view.session.max_kept_events == 100
    assert view.segment_ms == 3_600_000


def test_a_full_definition_and_its_output_columns():
    (view,) = parse_views(
        _session(
            session_key="client",
            gap="10m",
            max_duration="2h",
            kept_fields=["event_type", "bytes_tx"],
            max_kept_events=20,
            allowed_lateness="30s",
            aggregation_info=[
                {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
                {"aggregation": "first", "col_name": "org", "aggregated_col_name": "org"},
            ],
        )
    )
    spec = view.session
    assert (spec.key, spec.gap_ms, spec.max_duration_ms) == ("client", 600_000, 7_200_000)
    assert spec.kept_fields == ("event_type", "bytes_tx") and spec.max_kept_events == 20
    assert view.allowed_lateness_ms == 30_000
    names = view.output_schema().names
    assert names[:7] == ["client", *SESSION_COLUMNS]
    assert names[7:] == ["bytes", "org"]
    assert view.key_columns == ["client", "session_start"]


def test_fingerprint_changes_with_every_session_rule():
    (base,) = parse_views(_session())
    for change in (
        {"gap": "20m"},
        {"max_duration": "3h"},
        {"session_key": "client"},
        {"kept_fields": ["org"]},
        {"max_kept_events": 5},
    ):
        (other,) = parse_views(_session(**change))
        assert other.fingerprint != base.fingerprint, change


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"kind": "tumbling"},
            r"views\[0\] \(s\)\.kind: 'tumbling' is not a view kind \(kinds: window, session\)",
        ),
        ({"interval": "10m"}, r"\(s\)\.interval: not for kind: session"),
        ({"grouping_cols": ["org"]}, r"\(s\)\.grouping_cols: not for kind: session"),
        (
            {"session_key": "bytes_tx"},
            r"session_key: 'bytes_tx' is not a string column \(string columns of topic",
        ),
        ({"session_key": "visit"}, r"session_key: 'visit' is not a string column"),
        ({"gap": "soon"}, r"\(s\)\.gap: bad duration 'soon'"),
        ({"gap": "1500ms"}, r"\(s\)\.gap: 1500 ms; use whole seconds"),
        ({"gap": "1h", "max_duration": "30m"}, r"max_duration: 30m is shorter than the gap 1h"),
        ({"max_duration": "2d"}, r"max_duration: 2d is longer than 1d"),
        ({"kept_fields": "event_type"}, r"kept_fields: expected a list of column names"),
        ({"kept_fields": ["event_time"]}, r"kept_fields: unknown column 'event_time'"),
        ({"kept_fields": ["typ"]}, r"kept_fields: unknown column 'typ'"),
        ({"kept_fields": ["org", "org"]}, r"kept_fields: \['org', 'org'\] repeats a column"),
        ({"max_kept_events": 0}, r"max_kept_events: 0 must be an integer in \[1, 1000\]"),
        ({"max_kept_events": 5000}, r"max_kept_events: 5000 must be an integer in \[1, 1000\]"),
        ({"max_kept_events": True}, r"max_kept_events: True must be an integer"),
        ({"window": "10m"}, r"unknown key\(s\) 'window'"),
        (
            {"aggregation_info": [{"aggregation": "count", "aggregated_col_name": "open"}]},
            r"output column 'open' is defined twice",
        ),
        (
            {"aggregation_info": [{"aggregation": "count", "aggregated_col_name": "session_id"}]},
            r"output column 'session_id' is defined twice",
        ),
        ({"aggregation_info": []}, r"aggregation_info: expected a non-empty list"),
    ],
)
def test_mistakes_get_precise_messages(overrides, message):
    with pytest.raises(ViewDefinitionError, match=message):
        parse_views(_session(**overrides), source="views.yaml")


def test_unknown_aggregation_names_the_registry():
    bad = [{"aggregation": "medain", "col_name": "bytes_tx", "aggregated_col_name": "m"}]
    with pytest.raises(UnknownAggregation, match=r"aggregation_info\[0\]\.aggregation: unknown"):
        parse_views(_session(aggregation_info=bad))


def test_windowed_views_reject_session_keys():
    view = {
        "name": "w",
        "topic": "events",
        "interval": "10m",
        "gap": "5m",
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
    }
    with pytest.raises(ViewDefinitionError, match=r"unknown key\(s\) 'gap'"):
        parse_views({"views": [view]})
