"""Each loaded view carries its topic's declaration: the views file's own, else the topics
file's declaration of that topic, else the topics file's "*"; a declaration the archive cannot
hold yet is refused at load, not at the first flush."""

from __future__ import annotations

import pytest
import yaml

from pipelines.config import get_settings
from pipelines.events.declaration import TimeFormat
from pipelines.exceptions import ViewDefinitionError
from pipelines.views import check_views, parse_views

VIEW = {
    "name": "n",
    "topic": "payments",
    "grouping_cols": ["org"],
    "interval": "5m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "events"}],
}


def nested(topic: str = "payments") -> dict:
    """The archive's columns, read from nested objects, with an ISO-8601 event time."""
    return {
        "topic": topic,
        "id": "event_id",
        "event_time": {"path": "created.at", "format": "iso8601"},
        "fields": [
            {"name": "event_id", "type": "string", "path": "id"},
            {"name": "org", "type": "string", "path": "merchant.org"},
            {"name": "client", "type": "string", "path": "card.client"},
            {"name": "bytes_tx", "type": "long", "path": "amount.cents"},
            {"name": "session_id", "type": "string", "path": "checkout"},
            {"name": "event_type", "type": "string", "path": "kind"},
        ],
    }


@pytest.fixture
def topics_file(tmp_path, monkeypatch):
    def write(declarations: list[dict]):
        path = tmp_path / "topics.yaml"
        path.write_text(yaml.safe_dump({"topics": declarations}))
        monkeypatch.setenv("SLUICE_TOPICS_FILE", str(path))
        get_settings.cache_clear()
        return path

    yield write
    get_settings.cache_clear()


def test_a_view_takes_its_files_own_declaration() -> None:
    (view,) = parse_views({"topics": [nested()], "views": [VIEW]})
    assert view.declaration is not None and view.declaration.topic == "payments"
    assert view.declaration.event_time.format is TimeFormat.ISO8601


def test_without_one_the_shipped_topics_file_declares_any_topic() -> None:
    (view,) = parse_views({"views": [VIEW]})
    assert view.declaration is not None and view.declaration.topic == "*"
    assert "bytes_tx" in view.declaration.columns()


def test_the_topics_files_named_declaration_comes_before_its_star(topics_file) -> None:
    star = {**nested("*"), "event_time": {"path": "t", "format": "epoch_s"}}
    topics_file([nested(), star])
    (view,) = parse_views({"views": [VIEW]})
    assert view.declaration.topic == "payments"
    (other,) = parse_views({"views": [{**VIEW, "topic": "clicks"}]})
    assert other.declaration.topic == "*"


def test_a_topic_declared_nowhere_is_a_problem_naming_where_to_declare_it(topics_file) -> None:
    path = topics_file([nested("clicks")])
    views, problems = check_views({"views": [VIEW]})
    assert views == []
    (problem,) = problems
    assert problem.where == "views[0] (n).topic"
    assert "'payments' is not declared" in problem.message and str(path) in problem.message


def test_a_bad_declaration_is_reported_with_its_path() -> None:
    bad = nested()
    bad["fields"][1]["type"] = "decimal"
    with pytest.raises(ViewDefinitionError, match=r"topics\[0\]\.fields\[1\]\.type"):
        parse_views({"topics": [bad], "views": [VIEW]})


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d["fields"].append({"name": "amount", "type": "double"}), "columns other"),
        (lambda d: d["fields"][3].update(type="double"), "columns other"),
        (lambda d: d["fields"][2].update(nullable=True), "nullable columns"),
        (lambda d: d.update(on_type_error="null"), "on_type_error: null"),
        (lambda d: d.update(id=None), "an id other than"),
        (lambda d: d.update(record={"key": "kafka_key"}), "record columns"),
    ],
)
def test_what_the_archive_cannot_hold_yet_is_refused_at_load(change, says) -> None:
    declaration = nested()
    change(declaration)
    views, problems = check_views({"topics": [declaration], "views": [VIEW]})
    assert views == []
    assert any(says in p.message and "not supported yet" in p.message for p in problems)
