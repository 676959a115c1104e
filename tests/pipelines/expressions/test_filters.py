"""The where: language: what parses, what is refused and why, and that the three compilations
(numpy for the stream, Spark for the correction, DuckDB SQL for the causes) agree."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.config import PROJECT_ROOT as ROOT
from pipelines.events.declaration import ColumnType, FieldDeclaration, TopicDeclaration
from pipelines.expressions import Filter, FilterError, parse_filter
from pipelines.views.topics import ANY_TOPIC, load_declarations

GENERATOR = load_declarations(ROOT / "data" / "topics.yaml")[ANY_TOPIC].columns()
"""The generator's declared columns, which these filters read."""


def typed(text: object) -> Filter:
    return parse_filter(text, GENERATOR)


VALID = [
    ("event_type = 'error'", [True, False, False, False]),
    ("event_type == 'error'", [True, False, False, False]),
    ("event_type != 'error'", [False, True, True, True]),
    ("event_type <> 'error'", [False, True, True, True]),
    ("bytes_tx > 100", [False, True, True, True]),
    ("bytes_tx >= 100 and bytes_tx < 1000", [True, True, False, False]),
    ("bytes_tx <= 1e3", [True, True, False, False]),
    ("bytes_tx = -1", [False, False, False, False]),
    ("org in ('a', 'b')", [True, True, False, False]),
    ("org not in ('a', 'b')", [False, False, True, True]),
    ("bytes_tx in (100, 5000)", [True, False, True, False]),
    ("client is null", [False, False, False, True]),
    ("client IS NOT NULL", [True, True, True, False]),
    ("not (org = 'a' or org = 'b')", [False, False, True, True]),
    ("NOT org = 'a' AND bytes_tx > 100", [False, True, True, True]),
    ("org = 'a' or org = 'b' and bytes_tx > 100", [True, True, False, False]),  # and binds first
    ("(org = 'a' or org = 'b') and bytes_tx > 100", [False, True, False, False]),
    ("event_type = 'it''s'", [False, False, False, True]),
    ('event_type = "error"', [True, False, False, False]),
    ("client > 'a'", [False, True, True, False]),  # a null compares to nothing
    ("not client = 'a'", [False, True, True, False]),  # ... and its negation neither
    ("client = 'a' or bytes_tx > 1000", [True, False, True, True]),
]
INVALID = [
    ("", "expected a filter"),
    ("   ", "expected a filter"),
    ("orgg = 'a'", "unknown field 'orgg' at 1 (event fields: event_time, event_id"),
    ("bytes_tx = 'x'", "bytes_tx is a number: compare it with a number, not 'x' (at 12)"),
    ("org = 5", "org is a string: compare it with a quoted string, not 5 (at 7)"),
    ("org", "expected a comparison (=, !=, <, <=, >, >=), in, not in or is [not] null at 4"),
    ("org = 'a' and", "expected an event field at 14, found the end"),
    ("(org = 'a'", "expected ')' at 11, found the end"),
    ("org = 'a')", "expected and, or or the end at 10, found ')'"),
    ("org in 'a'", "expected '(' after in at 8, found 'a'"),
    ("org in ('a' 'b')", "expected ',' or ')' at 13, found 'b'"),
    ("org is nul", "expected null at 8, found 'nul'"),
    ("org ! 'a'", "unexpected character '!' at 5"),
    ("org = 'a", 'unexpected character "\'" at 7'),
    ("__import__('os').system('x')", "unexpected character '.' at 17"),
    ("__import__ = 'os'", "unknown field '__import__' at 1"),
    ("org = 'a'; drop table x", "unexpected character ';' at 10"),
    ("'a' = org", "expected an event field at 1, found 'a'"),
    ("and = 1", "expected an event field at 1, found 'and'"),
    ("not " * 40 + "org = 'a'", "nested deeper than 32 levels"),
    ("org in (" + "'a', " * 600 + "'b')", "characters; a filter has at most 2000"),
]

COLUMNS = {
    "org": np.array(["a", "b", "c", "d"], dtype=object),
    "client": np.array(["a", "b", "c", None], dtype=object),
    "bytes_tx": np.array([100, 500, 5000, 2000], dtype=np.int64),
    "event_type": np.array(["error", "view", "download", "it's"], dtype=object),
}


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_filters_keep_the_rows_sql_would(text, expected):
    f = typed(text)
    assert f.mask(COLUMNS).tolist() == expected
    assert _duckdb(f, COLUMNS) == expected


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_filters_say_what_and_where(text, message):
    with pytest.raises(FilterError) as raised:
        typed(text)
    assert message in str(raised.value)


def test_a_filter_knows_the_fields_it_reads():
    f = typed("org = 'a' and (bytes_tx > 1 or not client is null)")
    assert f.fields == {"org", "bytes_tx", "client"}


_DUCKDB = duckdb.connect()


def _duckdb(f, columns) -> list[bool]:
    _DUCKDB.register("events", pa.table(columns))
    rows = _DUCKDB.execute(f"SELECT coalesce({f.sql()}, false) FROM events").fetchall()
    return [r[0] for r in rows]


def _tests(draw_field, draw_value):
    return st.one_of(
        st.builds(
            lambda f, op, v: f"{f} {op} {v}",
            draw_field,
            st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
            draw_value,
        ),
        st.builds(
            lambda f, vs: f"{f} in ({', '.join(vs)})",
            draw_field,
            st.lists(draw_value, min_size=1, max_size=3),
        ),
        st.builds(
            lambda f, vs: f"{f} not in ({', '.join(vs)})",
            draw_field,
            st.lists(draw_value, min_size=1, max_size=3),
        ),
        st.builds(lambda f, n: f"{f} is {n}null", draw_field, st.sampled_from(["", "not "])),
    )


STRING_TESTS = _tests(st.sampled_from(["org", "client"]), st.sampled_from(["'a'", "'b'", "'c'"]))
NUMBER_TESTS = _tests(st.just("bytes_tx"), st.integers(0, 6).map(str))
FILTERS = st.recursive(
    st.one_of(STRING_TESTS, NUMBER_TESTS),
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a} and {b})", inner, inner),
        st.builds(lambda a, b: f"({a} or {b})", inner, inner),
        st.builds(lambda a: f"not ({a})", inner),
    ),
    max_leaves=6,
)


def random_events(seed: int, n: int = 200) -> dict[str, np.ndarray]:
    """Strings with nulls among them, so SQL's three-valued logic is exercised."""
    rng = np.random.default_rng(seed)
    pick = np.array(["a", "b", "c", None], dtype=object)
    return {
        "org": pick[rng.integers(0, 3, n)],
        "client": pick[rng.integers(0, 4, n)],
        "bytes_tx": rng.integers(0, 7, n).astype(np.int64),
        "event_type": pick[rng.integers(0, 3, n)],
    }


@settings(max_examples=100, deadline=None)
@given(text=FILTERS)
def test_the_stream_mask_and_duckdb_agree_on_random_filters(text):
    f = typed(text)
    events = random_events(len(text))
    assert f.mask(events).tolist() == _duckdb(f, events)


PAYMENTS = TopicDeclaration(
    topic="payments",
    id="payment_id",
    fields=(
        FieldDeclaration(name="payment_id", type=ColumnType.STRING),
        FieldDeclaration(name="merchant", type=ColumnType.STRING),
        FieldDeclaration(name="amount", type=ColumnType.DOUBLE),
        FieldDeclaration(name="refunded", type=ColumnType.BOOLEAN),
    ),
).columns()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("org = 'a'", "unknown field 'org' at 1 (event fields: event_time, payment_id, merchant"),
        ("amount = 'x'", "amount is a number: compare it with a number, not 'x'"),
        ("merchant > 3", "merchant is a string: compare it with a quoted string, not 3"),
        ("refunded = 1", "refunded is a boolean: compare it with true or false, not 1"),
        ("refunded in ('yes')", "refunded is a boolean: compare it with true or false, not 'yes'"),
        ("amount = true", "expected a number or a quoted string at 10, found 'true'"),
    ],
)
def test_a_declaration_types_the_fields_of_a_filter(text, message):
    with pytest.raises(FilterError) as raised:
        parse_filter(text, PAYMENTS)
    assert message in str(raised.value)


def test_a_boolean_is_compared_with_true_or_false_in_every_engine():
    f = parse_filter("refunded = TRUE or not refunded != false", PAYMENTS)
    values = np.array([True, False, None], dtype=object)  # a null, as the stream hands it
    assert f.mask({"refunded": values}).tolist() == [True, True, False]
    assert f.sql() == '(("refunded" = TRUE) OR (NOT ("refunded" <> FALSE)))'


def test_a_declared_filter_reads_its_own_columns():
    f = parse_filter("amount >= 9.5 and merchant in ('a', 'b') and event_time > 0", PAYMENTS)
    assert f.fields == {"amount", "merchant", "event_time"}


def test_without_columns_a_filter_takes_its_literals_as_written():
    """An aggregation's own where: is typed where its view is checked, not again here."""
    assert parse_filter("anything = 'x' and other > 2").fields == {"anything", "other"}
