"""View definitions: the shipped examples load, and every kind of mistake gets a precise message."""

from __future__ import annotations

import pytest

from pipelines.config import PROJECT_ROOT
from pipelines.exceptions import UnknownAggregation, ViewDefinitionError
from pipelines.views import load_views, parse_duration, parse_views


def _view(**overrides):
    view = {
        "name": "v",
        "topic": "events",
        "grouping_cols": ["org"],
        "interval": "10m",
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
    }
    view.update(overrides)
    return {"views": [view]}


def test_shipped_examples_load_with_several_views():
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    assert len(views) >= 3
    used = {spec.aggregation for v in views for spec in v.aggregations}
    assert {"count", "sum", "approx_count_distinct", "quantiles", "top_k"} <= used


def test_durations():
    assert parse_duration("10m", "x") == 600_000
    assert parse_duration("1h", "x") == 3_600_000
    assert parse_duration("30s", "x") == 30_000
    with pytest.raises(ViewDefinitionError, match=r"x: bad duration '10 minutes'"):
        parse_duration("10 minutes", "x")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {
                "aggregation_info": [
                    {"aggregation": "medain", "col_name": "bytes_tx", "aggregated_col_name": "m"}
                ]
            },
            r"aggregation_info\[0\]\.aggregation: unknown aggregation 'medain' \(known: .*count",
        ),
        (
            {
                "aggregation_info": [
                    {"aggregation": "sum", "col_name": "bytez", "aggregated_col_name": "s"}
                ]
            },
            r"col_name: unknown column 'bytez'",
        ),
        (
            {
                "aggregation_info": [
                    {"aggregation": "sum", "col_name": "org", "aggregated_col_name": "s"}
                ]
            },
            r"col_name: 'org' is a string column of topic '\w+'; sum takes long or double",
        ),
        ({"grouping_cols": ["orgz"]}, r"grouping_cols: unknown column 'orgz'"),
        ({"interval": "7m"}, r"interval: 420s does not divide an hour"),
        ({"interval": "soon"}, r"interval: bad duration 'soon'"),
        ({"interval": "5h"}, r"whole hours that divide a day"),
        ({"name": "Bad-Name"}, r"name: 'Bad-Name' must be lower-case"),
        ({"aggregation_info": []}, r"aggregation_info: expected a non-empty list"),
        ({"window": "10m"}, r"unknown key\(s\) 'window'"),
        (
            {
                "aggregation_info": [
                    {
                        "aggregation": "quantiles",
                        "col_name": "bytes_tx",
                        "aggregated_col_name": "q",
                        "params": {"quantiles": [1.5]},
                    }
                ]
            },
            r"params.quantiles: \[1.5\] must be numbers in \[0, 1\]",
        ),
        (
            {
                "aggregation_info": [
                    {
                        "aggregation": "top_k",
                        "col_name": "client",
                        "aggregated_col_name": "t",
                        "params": {"depth": 3},
                    }
                ]
            },
            r"top_k has no parameter 'depth'",
        ),
        (
            {"aggregation_info": [{"aggregation": "count", "aggregated_col_name": "org"}]},
            r"output column 'org' is defined twice",
        ),
    ],
)
def test_bad_definitions_say_what_and_where(overrides, message):
    with pytest.raises(ViewDefinitionError, match=message):
        parse_views(_view(**overrides), source="views.yaml")


def test_unknown_aggregation_is_its_own_error_class():
    doc = _view(aggregation_info=[{"aggregation": "nope", "aggregated_col_name": "x"}])
    with pytest.raises(UnknownAggregation):
        parse_views(doc)


def test_duplicate_view_names_are_rejected():
    doc = {"views": _view()["views"] * 2}
    with pytest.raises(ViewDefinitionError, match=r"duplicate view name 'v'"):
        parse_views(doc)


def test_yaml_is_never_executed(tmp_path):
    path = tmp_path / "views.yaml"
    path.write_text("views: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ViewDefinitionError, match="not valid YAML"):
        load_views(path)


def test_fingerprint_changes_with_the_definition():
    a = parse_views(_view())[0]
    b = parse_views(_view(interval="5m"))[0]
    c = parse_views(_view())[0]
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == c.fingerprint
