"""A views file a user can check: every mistake at once with its path, and a JSON Schema for
editors that agrees with the loader and cannot go stale."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipelines.aggregators import names
from pipelines.config import PROJECT_ROOT
from pipelines.exceptions import UnknownAggregation, ViewDefinitionError
from pipelines.views import load_views, parse_views
from pipelines.views.schema import views_json_schema

SHIPPED = PROJECT_ROOT / "data" / "views.yaml"
SHIPPED_SCHEMA = PROJECT_ROOT / "data" / "views.schema.json"

WINDOW = {
    "name": "v",
    "topic": "events",
    "grouping_cols": ["org"],
    "interval": "10m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
}
SESSION = {
    "name": "s",
    "kind": "session",
    "topic": "events",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
}


def _messages(document: Any) -> list[str]:
    with pytest.raises(ViewDefinitionError) as caught:
        parse_views(document, source="views.yaml")
    return str(caught.value).splitlines()


def test_three_mistakes_in_two_views_are_all_reported_with_their_paths(tmp_path) -> None:
    path = tmp_path / "views.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "views": [
                    {**WINDOW, "name": "a", "grouping_cols": ["orgz"], "interval": "7m"},
                    {**SESSION, "name": "b", "gap": "soon"},
                ]
            }
        )
    )
    with pytest.raises(ViewDefinitionError) as caught:
        load_views(path)
    assert str(caught.value).splitlines() == [
        f"{path}: views[0] (a).grouping_cols: unknown column 'orgz' (columns of topic 'events': "
        "event_id, org, client, bytes_tx, session_id, event_type)",
        f"{path}: views[0] (a).interval: 420s does not divide an hour",
        f"{path}: views[1] (b).gap: bad duration 'soon'; use a number and a unit, e.g. 30s, "
        "10m, 1h, 1d",
    ]


def test_unknown_keys_are_one_message_per_mapping_beside_the_other_mistakes() -> None:
    bad_aggregation = {"aggregation": "medain", "aggregated_col_name": "m", "x": 1, "y": 2}
    lines = _messages(
        {
            "views": [
                {**WINDOW, "window": "10m", "gap": "5m"},
                {**SESSION, "interval": "10m", "aggregation_info": [bad_aggregation]},
            ]
        }
    )
    assert lines[0].startswith("views.yaml: views[0] (v): unknown key(s) 'gap', 'window' (allowed:")
    assert lines[1].startswith("views.yaml: views[1] (s).interval: not for kind: session")
    assert lines[2].startswith(
        "views.yaml: views[1] (s).aggregation_info[0].aggregation: unknown aggregation 'medain'"
    )
    assert lines[3].startswith(
        "views.yaml: views[1] (s).aggregation_info[0]: unknown key(s) 'x', 'y' (allowed: "
        "aggregated_col_name, aggregation, col_name, params, where)"
    )
    assert len(lines) == 4


def test_an_unknown_aggregation_among_other_mistakes_is_still_its_own_error_class() -> None:
    bad = {**WINDOW, "topic": "", "aggregation_info": [{"aggregation": "nope"}]}
    with pytest.raises(UnknownAggregation) as caught:
        parse_views({"views": [bad]}, source="views.yaml")
    assert str(caught.value).splitlines() == [
        "views.yaml: views[0] (v).topic: a topic name is required",
        "views.yaml: views[0] (v).aggregation_info[0].aggregation: unknown aggregation 'nope' "
        f"(known: {', '.join(names())})",
        "views.yaml: views[0] (v).aggregation_info[0].aggregated_col_name: an output column "
        "name is required (lower-case letters, digits and _)",
    ]


def test_missing_keys_duplicates_and_shapes_get_todays_wording() -> None:
    no_topic = {k: v for k, v in WINDOW.items() if k != "topic"}
    lines = _messages(
        {"views": [no_topic, {**WINDOW, "aggregation_info": "count"}, 5, {**WINDOW, "kind": 3}]}
    )
    assert lines == [
        "views.yaml: views[0] (v).topic: a topic name is required",
        "views.yaml: views[1] (v).aggregation_info: expected a non-empty list",
        "views.yaml: views[2]: expected a mapping, got int",
        "views.yaml: views[3] (v).kind: 3 is not a view kind (kinds: window, session)",
        "views.yaml: duplicate view name 'v'",
    ]
    assert _messages({"views": []}) == ["views.yaml: expected a non-empty list under 'views:'"]


def test_defaults_and_values_build_the_same_frozen_views() -> None:
    (window, session) = parse_views({"views": [WINDOW, SESSION]})
    assert window.grouping_cols == ("org",) and window.interval_ms == 600_000
    assert window.allowed_lateness_ms == 60_000 and window.session is None
    assert window.aggregations[0].params == {} and window.aggregations[0].col_kind is None
    assert session.session is not None and session.session.gap_ms == 30 * 60_000
    with pytest.raises(AttributeError):
        window.name = "other"  # type: ignore[misc]


def test_the_shipped_schema_file_is_this_registrys_schema_for_the_built_in_aggregations() -> None:
    """``sluice views schema > data/views.schema.json`` regenerates it (an aggregation a test
    registered, e.g. tests/fixtures/poison.py's, is not in the shipped file)."""
    shipped = json.loads(SHIPPED_SCHEMA.read_text())
    built_in = shipped["$defs"]["AggregationDefinition"]["properties"]["aggregation"]["enum"]
    assert set(built_in) <= set(names())
    assert views_json_schema(built_in) == shipped
    assert SHIPPED.read_text().startswith("# yaml-language-server: $schema=./views.schema.json\n")


def test_the_schema_accepts_the_shipped_views_file() -> None:
    schema = views_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    document = yaml.safe_load(SHIPPED.read_text())
    jsonschema.Draft202012Validator(schema).validate(document)
    assert {v["name"] for v in document["views"]} == {v.name for v in load_views(SHIPPED)}


def _schema_reasons(document: Any) -> list[str]:
    """Every leaf error of the schema (inside oneOf / if-then too): path and message."""
    validator = jsonschema.Draft202012Validator(views_json_schema())
    reasons: list[str] = []
    pending = list(validator.iter_errors(document))
    while pending:
        error = pending.pop()
        pending += error.context or []
        reasons.append(" ".join(map(str, error.absolute_path)) + " " + error.message)
    return reasons


@pytest.mark.parametrize(
    ("view", "field"),
    [
        ({**WINDOW, "grouping_cols": ["org", "org"]}, "grouping_cols"),
        ({**WINDOW, "interval": "soon"}, "interval"),
        ({**WINDOW, "name": "Bad-Name"}, "name"),
        ({**WINDOW, "topic": ""}, "topic"),
        ({k: v for k, v in WINDOW.items() if k != "topic"}, "topic"),
        ({**WINDOW, "aggregation_info": []}, "aggregation_info"),
        ({**WINDOW, "window": "10m"}, "window"),
        ({**WINDOW, "kind": "tumbling"}, "kind"),
        (
            {**WINDOW, "aggregation_info": [{"aggregation": "medain", "aggregated_col_name": "m"}]},
            "aggregation",
        ),
        (
            {**WINDOW, "aggregation_info": [{"aggregation": "sum", "aggregated_col_name": "s"}]},
            "col_name",
        ),
        (
            {
                **WINDOW,
                "aggregation_info": [
                    {
                        "aggregation": "top_k",
                        "col_name": "client",
                        "aggregated_col_name": "t",
                        "params": {"depth": 3},
                    }
                ],
            },
            "depth",
        ),
        (
            {
                **WINDOW,
                "aggregation_info": [
                    {
                        "aggregation": "quantiles",
                        "col_name": "bytes_tx",
                        "aggregated_col_name": "q",
                        "params": {"quantiles": [1.5]},
                    }
                ],
            },
            "quantiles",
        ),
        ({**SESSION, "max_kept_events": 0}, "max_kept_events"),
        ({**SESSION, "interval": "10m"}, "interval"),
        ({**SESSION, "gap": "5 minutes"}, "gap"),
    ],
)
def test_what_the_schema_rejects_the_loader_rejects_for_the_same_field(view, field) -> None:
    """Rules a JSON Schema cannot state (an interval dividing an hour, max_duration against the
    gap, output names defined twice, duplicate view names) are the loader's alone."""
    document = {"views": [view]}
    assert any(field in reason for reason in _schema_reasons(document))
    lines = _messages(document)
    assert len(lines) == 1 and field in lines[0], lines


@pytest.mark.parametrize(
    ("view", "field"),
    [
        ({**WINDOW, "grouping_cols": ["orgz"]}, "grouping_cols"),
        (
            {
                **WINDOW,
                "aggregation_info": [
                    {"aggregation": "sum", "col_name": "org", "aggregated_col_name": "s"}
                ],
            },
            "col_name",
        ),
        ({**SESSION, "session_key": "bytes_tx"}, "session_key"),
        ({**SESSION, "kept_fields": ["event_time"]}, "kept_fields"),
    ],
)
def test_the_columns_of_the_topics_declaration_are_the_loaders_to_check(view, field) -> None:
    """The schema takes any column name (which columns exist is the topic's declaration's to
    say, and a views file may read several topics); the loader refuses the wrong ones."""
    document = {"views": [view]}
    assert not any(field in reason for reason in _schema_reasons(document))
    lines = _messages(document)
    assert len(lines) == 1 and field in lines[0], lines


_YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = sorted({*WINDOW, *SESSION, "gap", "max_duration", "kept_fields", "session_key", "params"})


@settings(max_examples=300, deadline=None)
@example(base=WINDOW, changes={"topic": "\x1e"}, aggregation={})
@given(
    base=st.sampled_from([WINDOW, SESSION]),
    changes=st.dictionaries(st.sampled_from(_KEYS), _YAML_VALUES, max_size=3),
    aggregation=st.dictionaries(
        st.sampled_from(["aggregation", "col_name", "aggregated_col_name", "params"]),
        _YAML_VALUES,
        max_size=2,
    ),
)
def test_any_yaml_value_anywhere_gets_a_view_definition_error_never_a_crash(
    base, changes, aggregation
) -> None:
    entry = {"aggregation": "top_k", "col_name": "org", "aggregated_col_name": "t", **aggregation}
    view = {**base, "aggregation_info": [entry], **changes}
    try:
        parse_views({"views": [view]}, source="views.yaml")
    except ViewDefinitionError as exc:
        assert all(line.startswith("views.yaml: ") for line in str(exc).splitlines())


def test_filter_and_aggregation_mistakes_are_reported_together_with_their_paths() -> None:
    """where: on a view and on one aggregation, the new aggregations' params and columns."""
    lines = _messages(
        {
            "views": [
                {**WINDOW, "where": "orgg = 'a'"},
                {
                    **SESSION,
                    "where": "bytes_tx > 'big'",
                    "aggregation_info": [
                        {"aggregation": "count_if", "aggregated_col_name": "n"},
                        {
                            "aggregation": "sum",
                            "col_name": "bytes_tx",
                            "aggregated_col_name": "s",
                            "where": "event_type = 'error' and",
                        },
                        {
                            "aggregation": "max_by",
                            "col_name": "org",
                            "aggregated_col_name": "m",
                            "params": {"by": "org"},
                        },
                        {
                            "aggregation": "ratio",
                            "col_name": "bytes_tx",
                            "aggregated_col_name": "r",
                        },
                        {
                            "aggregation": "cdf",
                            "col_name": "bytes_tx",
                            "aggregated_col_name": "c",
                            "params": {"split_points": [5, 1]},
                        },
                    ],
                },
            ]
        }
    )
    assert lines == [
        "views.yaml: views[0] (v).where: unknown field 'orgg' at 1 (event fields: event_time, "
        "event_id, org, client, bytes_tx, session_id, event_type)",
        "views.yaml: views[1] (s).where: bytes_tx is a number: compare it with a number, "
        "not 'big' (at 12)",
        "views.yaml: views[1] (s).aggregation_info[0]: count_if needs a where: (the events it "
        "counts or sums)",
        "views.yaml: views[1] (s).aggregation_info[1].where: expected an event field at 25, "
        "found the end",
        "views.yaml: views[1] (s).aggregation_info[2].params.by: 'org' is a string column of "
        "topic 'events'; max_by's by takes long, double or timestamp",
        "views.yaml: views[1] (s).aggregation_info[3].params: ratio needs params denominator",
        "views.yaml: views[1] (s).aggregation_info[4].params: split_points must increase "
        "strictly: [5, 1]",
    ]


def test_a_view_with_filters_and_new_aggregations_loads() -> None:
    views = parse_views(
        {
            "views": [
                {
                    **WINDOW,
                    "where": "event_type in ('view', 'download') and bytes_tx > 0",
                    "aggregation_info": [
                        {
                            "aggregation": "count_if",
                            "aggregated_col_name": "big",
                            "where": "bytes_tx >= 1000000",
                        },
                        {
                            "aggregation": "ratio",
                            "col_name": "bytes_tx",
                            "aggregated_col_name": "r",
                            "params": {"denominator": "event_time"},
                        },
                    ],
                }
            ]
        },
        source="views.yaml",
    )
    view = views[0]
    assert view.where == "event_type in ('view', 'download') and bytes_tx > 0"
    assert view.filter is not None and view.filter.fields == {"event_type", "bytes_tx"}
    assert view.aggregations[0].where == "bytes_tx >= 1000000"
    assert "where:" in view.fingerprint and "where=bytes_tx >= 1000000" in view.fingerprint


def test_sliding_windows_are_checked_against_their_interval() -> None:
    lines = _messages(
        {
            "views": [
                {**WINDOW, "name": "a", "interval": "1h", "slide": "7m"},
                {**WINDOW, "name": "b", "interval": "1h", "slide": "2h"},
                {**WINDOW, "name": "c", "interval": "1h", "slide": "30s"},
                {**WINDOW, "name": "d", "interval": "1h", "slide": "1500ms"},
                {**SESSION, "slide": "5m"},
            ]
        }
    )
    assert lines[:4] == [
        "views.yaml: views[0] (a).slide: 7m does not divide the interval 1h",
        "views.yaml: views[1] (b).slide: 2h does not divide the interval 1h",
        "views.yaml: views[2] (c).slide: 120 windows per event; at most 60 (a longer slide, "
        "or a shorter interval)",
        "views.yaml: views[3] (d).slide: 1500 ms; a slide is whole seconds, at least 1s",
    ]
    assert lines[4].startswith("views.yaml: views[4] (s): unknown key(s) 'slide'")
    (view,) = parse_views(
        {"views": [{**WINDOW, "interval": "1h", "slide": "5m"}]}, source="views.yaml"
    )
    assert view.is_sliding and view.step_ms == 300_000 and view.windows_per_event == 12
    assert view.reach_ms == 55 * 60_000 and "slide:300000" in view.fingerprint
    (tumbling,) = parse_views(
        {"views": [{**WINDOW, "interval": "1h", "slide": "1h"}]}, source="views.yaml"
    )
    assert (
        not tumbling.is_sliding
        and tumbling.fingerprint
        == parse_views({"views": [{**WINDOW, "interval": "1h"}]}, source="views.yaml")[
            0
        ].fingerprint
    )
