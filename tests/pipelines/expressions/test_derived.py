"""Derived columns: what a declaration accepts and refuses (and why), and that the stream's numpy
evaluation, DuckDB's SQL and a plain-Python reference (``datetime`` for hours and weekdays,
``str`` for case) agree on random expressions over random rows with nulls. Spark's compilation
is held to the same reference in ``tests/pipelines/batch/test_derived_spark.py``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pipelines.events.declaration import ColumnType, TopicDeclaration
from pipelines.expressions.derived import ExpressionError, parse_derived
from pipelines.views import check_views, parse_views
from tests.fixtures.expressions import (
    COLUMNS,
    NULLABLE,
    duckdb_values,
    expressions,
    rows,
    stream_values,
)

KINDS = list(ColumnType)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KINDS).flatmap(expressions), rows())
def test_the_stream_and_duckdb_equal_the_reference(expression, data) -> None:
    text, reference = expression
    expected = [reference(row) for row in data]
    got, _ = stream_values(text, data)
    assert got == expected, text
    assert all(type(v) is type(e) for v, e in zip(got, expected, strict=True) if e is not None)
    assert duckdb_values(text, data) == expected, text


def test_the_result_type_and_nullability_are_inferred() -> None:
    def parsed(text: str):
        found = parse_derived("x", text, COLUMNS, NULLABLE)
        return found.type, found.nullable

    assert parsed("lower(s)") == (ColumnType.STRING, True)
    assert parsed("upper(t)") == (ColumnType.STRING, False)
    assert parsed("hour(ts)") == (ColumnType.LONG, True)
    assert parsed("WEEKDAY(ts)") == (ColumnType.LONG, True)  # function names in any case
    assert parsed("abs(d)") == (ColumnType.DOUBLE, True)
    assert parsed("coalesce(s, 'unknown')") == (ColumnType.STRING, False)
    assert parsed("coalesce(s, lower(s))") == (ColumnType.STRING, True)
    assert parsed("coalesce(n, d)") == (ColumnType.DOUBLE, True)
    assert parsed("coalesce(n, 1.5)") == (ColumnType.DOUBLE, False)
    assert parsed("coalesce(ts, 0)") == (ColumnType.TIMESTAMP, False)
    assert parsed("coalesce(b, b)") == (ColumnType.BOOLEAN, True)
    assert parsed("m") == (ColumnType.LONG, False)


def test_hour_and_weekday_are_utc_and_iso() -> None:
    monday_2024 = int(datetime(2024, 1, 1, 23, 59, 59, 999000, tzinfo=UTC).timestamp() * 1000)
    data = [{**dict.fromkeys(COLUMNS), "t": "", "m": 0, "ts": ts} for ts in (monday_2024, 0, -1)]
    assert stream_values("hour(ts)", data)[0] == [23, 0, 23]
    assert stream_values("weekday(ts)", data)[0] == [1, 4, 3]  # Monday; 1970-01-01 a Thursday
    assert duckdb_values("weekday(ts)", data) == [1, 4, 3]


REFUSED = [
    ("lowr(s)", "unknown function 'lowr' at 1 (functions: abs, coalesce, hour, lower, upper, "),
    ("lower(x)", "unknown column 'x' at 7 (columns: s, t, n, m, d, ts, b)"),
    ("lower(n)", "lower takes a string, not n (long) (at 7)"),
    ("hour(s)", "hour takes a timestamp, not s (string) (at 6)"),
    ("weekday(n)", "weekday takes a timestamp, not n (long) (at 9)"),
    ("abs(s)", "abs takes a long or a double, not s (string) (at 5)"),
    ("abs(hour(ts), n)", "abs takes one value, got 2 (at 1)"),
    ("coalesce(s)", "coalesce takes two values or more (at 1)"),
    ("coalesce(s, n)", "coalesce takes values of one type, got long, string (at 1)"),
    ("coalesce(n, 'x')", "coalesce takes values of one type: 'x' (string) is not a long (at 13)"),
    ("coalesce(ts, 1.5)", "'1.5 (double)' is not"),
    ("coalesce('a', 'b')", "coalesce of literals only is a constant (at 1)"),
    ("lower('A')", "lower of a literal is a constant (at 1)"),
    ("lower(s) s", "expected the end at 10, found 's'"),
    ("lower(s", "expected ',' or ')' at 8, found the end"),
    ("lower(,)", "expected a column, a function or a literal at 7, found ','"),
    ("lower(s) and t", "expected the end at 10, found 'and'"),
    ("null", "expected a column, a function or a literal at 1, found 'null'"),
    ("s + t", "unexpected character '+' at 3"),
    ("", 'expected an expression such as "lower(merchant)"'),
    ("lower(" * 40 + "s" + ")" * 40, "nested deeper than 32 calls"),
]


@pytest.mark.parametrize(("text", "message"), REFUSED)
def test_mistakes_are_refused_saying_what_and_where(text: str, message: str) -> None:
    if message.startswith("'1.5"):
        message = "coalesce takes values of one type: 1.5 (double) is not a timestamp (at 14)"
    with pytest.raises(ExpressionError) as caught:
        parse_derived("x", text, COLUMNS, NULLABLE)
    assert message in str(caught.value)


# --- in a declaration -------------------------------------------------------------------------

PAYMENTS = {
    "topic": "payments",
    "fields": [
        {"name": "merchant", "type": "string"},
        {"name": "card_country", "type": "string", "path": "card.country", "nullable": True},
        {"name": "amount", "type": "double"},
    ],
    "event_time": {"path": "created", "format": "iso8601"},
    "record": {"key": "card"},
}


def declared(*derived: dict) -> TopicDeclaration:
    return TopicDeclaration.model_validate({**PAYMENTS, "derived": list(derived)})


def test_a_declaration_types_its_derived_columns_in_order() -> None:
    declaration = declared(
        {"name": "merchant_lc", "expr": "lower(merchant)"},
        {"name": "hour_of_day", "expr": "hour(event_time)"},
        {"name": "country", "expr": "coalesce(card_country, 'unknown')"},
        {"name": "country_uc", "expr": "upper(country)"},  # an earlier derived column
        {"name": "card_uc", "expr": "upper(card)"},  # a record column (nullable)
    )
    columns = declaration.columns()
    assert {name: columns[name] for name in list(columns)[-5:]} == {
        "merchant_lc": "string",
        "hour_of_day": "long",
        "country": "string",
        "country_uc": "string",
        "card_uc": "string",
    }
    assert "merchant_lc" not in declaration.stored_columns()
    nullable = declaration.nullable_columns()
    assert {"card_country", "card_uc"} <= nullable
    assert not {"merchant_lc", "hour_of_day", "country", "country_uc"} & nullable
    assert [d.name for d in declaration.derived_columns()] == list(columns)[-5:]


@pytest.mark.parametrize(
    ("derived", "message"),
    [
        (
            [{"name": "x", "expr": "lower(later)"}, {"name": "later", "expr": "upper(merchant)"}],
            "derived[0] (x): unknown column 'later' at 7",
        ),
        ([{"name": "m", "expr": "hour(merchant)"}], "derived[0] (m): hour takes a timestamp"),
        ([{"name": "merchant", "expr": "lower(merchant)"}], "columns declared twice: merchant"),
        ([{"name": "offset", "expr": "lower(merchant)"}], "the archive's own column names"),
        ([{"name": "event_time", "expr": "abs(amount)"}], "'event_time' is the decoded"),
        ([{"name": "bad name", "expr": "lower(merchant)"}], "bad column name 'bad name'"),
    ],
)
def test_a_declaration_refuses_a_bad_derived_column(derived: list, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        declared(*derived)
    assert message in str(caught.value)


def test_a_derived_column_cannot_be_the_id() -> None:
    with pytest.raises(ValidationError, match="id 'm' is a derived column"):
        TopicDeclaration.model_validate(
            {**PAYMENTS, "id": "m", "derived": [{"name": "m", "expr": "lower(merchant)"}]}
        )


# --- in views -------------------------------------------------------------------------------

GENERATOR_TOPIC = {
    "topic": "events",
    "id": "event_id",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "org", "type": "string"},
        {"name": "client", "type": "string"},
        {"name": "bytes_tx", "type": "long", "minimum": 0},
        {"name": "session_id", "type": "string"},
        {"name": "event_type", "type": "string"},
    ],
    "derived": [
        {"name": "org_uc", "expr": "upper(org)"},
        {"name": "hour_of_day", "expr": "hour(event_time)"},
    ],
}


def _view_problems(**changes) -> list[str]:
    view = {
        "name": "v",
        "topic": "events",
        "grouping_cols": ["org_uc"],
        "interval": "1h",
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
        **changes,
    }
    views, problems = check_views({"topics": [GENERATOR_TOPIC], "views": [view]})
    assert bool(views) != bool(problems)
    return [p.line("views.yaml") for p in problems]


def test_views_group_filter_and_aggregate_by_derived_columns_as_by_any() -> None:
    assert _view_problems() == []
    assert (
        _view_problems(
            where="hour_of_day >= 9 and org_uc = 'ACME'",
            aggregation_info=[
                {"aggregation": "max", "col_name": "hour_of_day", "aggregated_col_name": "h"}
            ],
        )
        == []
    )
    assert _view_problems(where="hour_of_day = 'x'") == [
        "views.yaml: views[0] (v).where: hour_of_day is a number: compare it with a number, "
        "not 'x' (at 15)"
    ]
    assert _view_problems(
        aggregation_info=[{"aggregation": "sum", "col_name": "org_uc", "aggregated_col_name": "s"}]
    ) == [
        "views.yaml: views[0] (v).aggregation_info[0].col_name: 'org_uc' is a string column of "
        "topic 'events'; sum takes long or double"
    ]


def test_a_bad_derived_column_is_a_problem_of_the_views_file() -> None:
    topic = {**GENERATOR_TOPIC, "derived": [{"name": "h", "expr": "hour(org)"}]}
    view = {
        "name": "v",
        "topic": "events",
        "interval": "1h",
        "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
    }
    _, problems = check_views({"topics": [topic], "views": [view]})
    assert [p.line("views.yaml") for p in problems] == [
        "views.yaml: topics[0]: Value error, derived[0] (h): hour takes a timestamp, not org "
        "(string) (at 6)"
    ]


def test_a_changed_expression_a_view_reads_changes_its_fingerprint() -> None:
    def fingerprint(derived: list[dict], **changes) -> str:
        topic = {**GENERATOR_TOPIC, "derived": derived}
        view = {
            "name": "v",
            "topic": "events",
            "grouping_cols": ["org"],
            "interval": "1h",
            "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
            **changes,
        }
        (parsed,) = parse_views({"topics": [topic], "views": [view]})
        return parsed.fingerprint

    base = [{"name": "a", "expr": "upper(org)"}, {"name": "b", "expr": "lower(a)"}]
    other = [{"name": "a", "expr": "lower(org)"}, {"name": "b", "expr": "lower(a)"}]
    plain = fingerprint([])
    assert fingerprint(base) == fingerprint(other) == plain  # reads none of them
    assert fingerprint(base, where="b = 'x'") != fingerprint(other, where="b = 'x'")
    assert fingerprint(base, grouping_cols=["b"]) != fingerprint(other, grouping_cols=["b"])
    assert fingerprint(base, grouping_cols=["b"]) == fingerprint(base, grouping_cols=["b"])
