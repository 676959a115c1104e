"""Each view reads its topic with a declaration: the views file's own, then the topics file's,
then the topics file's "*"; validation names the topic's declared columns and types."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestration.control_plane.spark.correction_job import CorrectionRequest
from pipelines.config import get_settings
from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import ViewDefinitionError
from pipelines.views import check_views, load_views, parse_views, resolve_views
from pipelines.views.topics import declarations_of

PAYMENTS = {
    "topic": "payments",
    "id": "payment_id",
    "fields": [
        {"name": "payment_id", "type": "string"},
        {"name": "merchant", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "cents", "type": "long"},
        {"name": "refunded", "type": "boolean"},
    ],
}
REVENUE = {
    "name": "revenue",
    "topic": "payments",
    "grouping_cols": ["merchant"],
    "interval": "1h",
    "where": "amount > 0.5 and merchant != 'x'",
    "aggregation_info": [
        {"aggregation": "sum", "col_name": "amount", "aggregated_col_name": "revenue"},
        {"aggregation": "max", "col_name": "cents", "aggregated_col_name": "top"},
    ],
}
GENERATOR_VIEW = {
    "name": "per_org",
    "topic": "events",
    "grouping_cols": ["org"],
    "interval": "10m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
}


@pytest.fixture
def topics_file(tmp_path: Path, monkeypatch):
    """A topics file of the test's own (SLUICE_TOPICS_FILE), written by the returned function."""
    path = tmp_path / "topics.yaml"
    monkeypatch.setenv("SLUICE_TOPICS_FILE", str(path))
    get_settings.cache_clear()

    def write(*declarations: dict) -> Path:
        path.write_text(yaml.safe_dump({"topics": list(declarations)}))
        return path

    yield write
    get_settings.cache_clear()


def _messages(document: dict) -> list[str]:
    return [p.line("views.yaml") for p in check_views(document)[1]]


def test_a_topic_declared_in_the_views_file_wins_over_the_topics_file(topics_file) -> None:
    topics_file({**PAYMENTS, "fields": [{"name": "payment_id", "type": "string"}]})
    (view,) = parse_views({"views": [REVENUE], "topics": [PAYMENTS]})
    assert view.declaration is not None and view.declaration.topic == "payments"
    assert view.declaration.columns()["amount"] == "double"
    assert view.aggregations[1].col_kind == "int"


def test_the_topics_file_declares_a_topic_by_name_before_its_star(topics_file) -> None:
    star = {**PAYMENTS, "topic": "*", "fields": [{"name": "payment_id", "type": "string"}]}
    topics_file(star, PAYMENTS)
    (view,) = parse_views({"views": [REVENUE]})
    assert view.declaration == TopicDeclaration.model_validate(PAYMENTS)


def test_star_declares_a_topic_declared_nowhere_else_under_its_own_name(topics_file) -> None:
    topics_file({**PAYMENTS, "topic": "*"})
    (view,) = parse_views({"views": [REVENUE]})
    assert view.declaration is not None and view.declaration.topic == "payments"


def test_a_topic_declared_nowhere_is_a_problem_saying_where_to_declare_it(topics_file) -> None:
    topics_file({**PAYMENTS, "topic": "cards"})
    assert _messages({"views": [REVENUE]}) == [
        "views.yaml: views[0] (revenue).topic: topic 'payments' is declared nowhere: declare it "
        "under topics: in the views file or in the topics file (SLUICE_TOPICS_FILE)"
    ]


def test_the_shipped_views_read_the_generators_declaration() -> None:
    views = load_views(Path(__file__).parents[3] / "data" / "views.yaml")
    assert {v.declaration.id for v in views if v.declaration} == {"event_id"}
    assert all(v.declaration is not None for v in views)


def test_an_unknown_column_names_the_topics_columns() -> None:
    view = {**REVENUE, "grouping_cols": ["org"]}
    assert _messages({"views": [view], "topics": [PAYMENTS]}) == [
        "views.yaml: views[0] (revenue).grouping_cols: unknown column 'org' (columns of topic "
        "'payments': payment_id, merchant, amount, cents, refunded)"
    ]


def test_a_type_refusal_names_the_declared_type() -> None:
    view = {
        **REVENUE,
        "aggregation_info": [
            {"aggregation": "sum", "col_name": "merchant", "aggregated_col_name": "s"},
            {"aggregation": "mean", "col_name": "refunded", "aggregated_col_name": "m"},
        ],
    }
    assert _messages({"views": [view], "topics": [PAYMENTS]}) == [
        "views.yaml: views[0] (revenue).aggregation_info[0].col_name: 'merchant' is a string "
        "column of topic 'payments'; sum takes long or double",
        "views.yaml: views[0] (revenue).aggregation_info[1].col_name: 'refunded' is a boolean "
        "column of topic 'payments'; mean takes long or double",
    ]


def test_filters_and_session_keys_follow_the_declaration() -> None:
    session = {
        "name": "visits",
        "kind": "session",
        "topic": "payments",
        "session_key": "amount",
        "kept_fields": ["cents", "org"],
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
    }
    window = {**REVENUE, "where": "merchant > 3"}
    assert _messages({"views": [window, session], "topics": [PAYMENTS]}) == [
        "views.yaml: views[0] (revenue).where: merchant is a string: compare it with a quoted "
        "string, not 3 (at 12)",
        "views.yaml: views[1] (visits).session_key: 'amount' is not a string column (string "
        "columns of topic 'payments': payment_id, merchant)",
        "views.yaml: views[1] (visits).kept_fields: unknown column 'org' (columns of topic "
        "'payments': payment_id, merchant, amount, cents, refunded; the event time is always kept)",
    ]
    (view,) = parse_views({"views": [REVENUE], "topics": [PAYMENTS]})
    assert view.filter is not None and view.filter.fields == {"amount", "merchant"}


def test_the_topics_of_a_views_file_are_validated_with_their_paths() -> None:
    wrong = {**PAYMENTS, "fields": [*PAYMENTS["fields"], {"name": "n", "type": "int"}]}
    (line,) = _messages({"views": [GENERATOR_VIEW], "topics": [wrong]})
    assert line.startswith("views.yaml: topics[0].fields[5].type: Input should be 'string'")


def test_a_deployed_view_reads_its_topic_with_the_views_files_declarations() -> None:
    deployed = [{"name": "revenue", "deployed_at": 1.0, "state": "Running", "definition": REVENUE}]
    topics = {"payments": TopicDeclaration.model_validate(PAYMENTS)}
    view = resolve_views([], 0.0, "none", deployed, topics)["revenue"].view
    assert view.declaration == topics["payments"]
    with pytest.raises(ViewDefinitionError, match="unknown column 'merchant'"):
        resolve_views([], 0.0, "none", deployed)  # the generator's "*" has no merchant


def test_the_correction_request_carries_its_views_declarations(topics_file) -> None:
    topics_file()  # no "*": the job must not need the topics file
    views = parse_views({"views": [REVENUE], "topics": [PAYMENTS]})
    request = CorrectionRequest([REVENUE], [0], "root", {}, declarations_of(views))
    received = CorrectionRequest.from_extras(request.extras())
    (view,) = parse_views(received.definitions, topics=received.declarations)
    assert view.declaration == TopicDeclaration.model_validate(PAYMENTS)


def test_the_json_schema_describes_a_views_files_topics() -> None:
    import jsonschema

    from pipelines.views import views_json_schema

    validator = jsonschema.Draft202012Validator(views_json_schema())
    good = {"views": [REVENUE], "topics": [PAYMENTS]}
    assert list(validator.iter_errors(good)) == []
    wrong = {**PAYMENTS, "fields": [{"name": "n", "type": "int"}]}
    (error,) = validator.iter_errors({"views": [REVENUE], "topics": [wrong]})
    assert list(error.absolute_path) == ["topics", 0, "fields", 0, "type"]
