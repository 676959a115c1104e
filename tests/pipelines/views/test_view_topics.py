"""Each loaded view carries its topic's declaration: the views file's own, else the topics
file's declaration of that topic, else the topics file's "*"."""

from __future__ import annotations

import pytest

from pipelines.config import get_settings
from pipelines.events.declaration import ColumnType
from pipelines.exceptions import ViewDefinitionError
from pipelines.views import check_views, parse_views

VIEW = {
    "name": "n",
    "topic": "payments",
    "grouping_cols": ["org"],
    "interval": "5m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "events"}],
}
PAYMENTS = {
    "topic": "payments",
    "id": "payment_id",
    "fields": [
        {"name": "payment_id", "type": "string"},
        {"name": "org", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


@pytest.fixture
def topics_file(tmp_path, monkeypatch):
    def write(text: str):
        path = tmp_path / "topics.yaml"
        path.write_text(text)
        monkeypatch.setenv("SLUICE_TOPICS_FILE", str(path))
        get_settings.cache_clear()
        return path

    yield write
    get_settings.cache_clear()


def test_a_view_takes_its_files_own_declaration() -> None:
    (view,) = parse_views({"topics": [PAYMENTS], "views": [VIEW]})
    assert view.declaration is not None
    assert view.declaration.topic == "payments"
    assert view.declaration.columns()["amount"] is ColumnType.DOUBLE


def test_without_one_the_shipped_topics_file_declares_any_topic() -> None:
    (view,) = parse_views({"views": [VIEW]})
    assert view.declaration is not None and view.declaration.topic == "*"
    assert "bytes_tx" in view.declaration.columns()


def test_the_topics_files_named_declaration_comes_before_its_star(topics_file) -> None:
    topics_file(
        "topics:\n"
        "  - {topic: payments, fields: [{name: org, type: string}, {name: cents, type: long}]}\n"
        "  - {topic: '*', fields: [{name: org, type: string}]}\n"
    )
    (view,) = parse_views({"views": [VIEW]})
    assert view.declaration.topic == "payments"
    (other,) = parse_views({"views": [{**VIEW, "topic": "clicks"}]})
    assert other.declaration.topic == "*"


def test_a_topic_declared_nowhere_is_a_problem_naming_where_to_declare_it(topics_file) -> None:
    path = topics_file("topics:\n  - {topic: clicks, fields: [{name: org, type: string}]}\n")
    views, problems = check_views({"views": [VIEW]})
    assert views == []
    (problem,) = problems
    assert problem.where == "views[0] (n).topic"
    assert "'payments' is not declared" in problem.message and str(path) in problem.message


def test_a_bad_declaration_is_reported_with_its_path() -> None:
    bad = {**PAYMENTS, "fields": [{"name": "org", "type": "decimal"}]}
    with pytest.raises(ViewDefinitionError, match=r"topics\[0\]\.fields\[0\]\.type"):
        parse_views({"topics": [bad], "views": [VIEW]})
