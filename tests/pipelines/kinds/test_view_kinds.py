"""The kinds of view: every ``kind:`` a definition may name has one kind object and one
implementation in every layer that treats kinds differently, found by the kind's name."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.batch.correct import CORRECTIONS
from pipelines.exceptions import QueryError
from pipelines.kinds import KINDS, by_kind, kind_of
from pipelines.kinds.session import Sessions
from pipelines.kinds.windowed import Windowed
from pipelines.serving.query import READS, query_view
from pipelines.stream.sessions import SessionState
from pipelines.stream.state import WindowState
from pipelines.stream.view_state import STATES, view_state
from pipelines.tables.schema import arrow_schema, partition_field, state_columns, time_columns
from pipelines.views import parse_views
from pipelines.views.model import VIEW_KINDS
from quality.reconcile.kinds import RECONCILERS

VIEWS = {
    "views": [
        {
            "name": "w",
            "topic": "events",
            "grouping_cols": ["org"],
            "interval": "5m",
            "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
        },
        {
            "name": "s",
            "kind": "session",
            "topic": "events",
            "gap": "10m",
            "max_duration": "2h",
            "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
        },
    ]
}


@pytest.fixture
def views():
    windowed, session = parse_views(VIEWS)
    return windowed, session


def test_every_kind_a_definition_names_has_one_kind_and_an_implementation_in_each_layer() -> None:
    assert tuple(KINDS) == VIEW_KINDS
    assert all(kind.name == name for name, kind in KINDS.items())
    for registry in (STATES, CORRECTIONS, READS, RECONCILERS):
        assert set(registry) == set(KINDS)


def test_each_view_gets_its_own_kind(views) -> None:
    windowed, session = views
    assert isinstance(kind_of(windowed), Windowed) and isinstance(kind_of(session), Sessions)
    grouped = by_kind([session, windowed, session])
    assert list(grouped) == list(KINDS.values())  # windows first: they count for sessions
    assert grouped[kind_of(session)] == [session, session]
    assert by_kind([session])[kind_of(windowed)] == []


def test_the_stream_state_is_the_kinds(views) -> None:
    windowed, session = views
    assert isinstance(view_state(windowed), WindowState)
    assert isinstance(view_state(session), SessionState)


def test_the_table_columns_are_the_kinds(views) -> None:
    windowed, session = views
    assert time_columns(windowed) == ("window_start", "window_end")
    assert partition_field(windowed) == "window_start"
    assert state_columns(windowed) == ["n__state"]
    assert time_columns(session) == ("session_start", "session_end")
    assert partition_field(session) == "session_start"
    assert state_columns(session) == []
    names = arrow_schema(session).names
    assert names[:3] == ["session_id", "session_start", "session_end"]


def test_what_the_catalog_and_listings_show(views) -> None:
    windowed, session = views
    assert kind_of(windowed).timing(windowed) == "5m"
    assert kind_of(session).timing(session) == "gap 10m, max 2h"
    assert kind_of(windowed).settings(windowed) == {"grouping_cols": ["org"], "interval": "5m"}
    assert kind_of(session).settings(session)["session_key"] == "session_id"
    assert kind_of(session).column_role(session, "session_id") == "session key"
    assert kind_of(session).column_role(session, "open") == "session bounds and summary"
    assert kind_of(windowed).column_role(windowed, "window_end") == "window bound"
    assert kind_of(windowed).column_role(windowed, "n") is None


def test_sessions_stay_whole_and_do_not_roll_up(views) -> None:
    windowed, session = views
    assert kind_of(windowed).bucket_refusal(windowed) is None
    assert "whole in one task" in (kind_of(session).bucket_refusal(session) or "")
    kind_of(windowed).check_rollup(windowed)
    with pytest.raises(QueryError, match="sessions do not roll up"):
        kind_of(session).check_rollup(session)


def test_a_windowed_view_has_no_active_rows(views) -> None:
    windowed, _ = views
    with pytest.raises(QueryError, match="--active is for session views"):
        query_view(None, windowed, 0, 1, tables=None, active=True)  # type: ignore[arg-type]


def test_quality_facts(views) -> None:
    windowed, session = views
    assert kind_of(windowed).value_rules and not kind_of(session).value_rules
    assert kind_of(windowed).sum_bucket_ms == 1
    assert kind_of(session).sum_bucket_ms == 3_600_000
    assert pa.types.is_timestamp(session.output_schema().field("session_start").type)


def test_a_views_own_columns_are_what_no_metric_may_reuse(views) -> None:
    windowed, session = views
    assert windowed.own_columns == ["window_start", "window_end", "org"]
    assert session.own_columns == [
        "session_id",
        "session_start",
        "session_end",
        "event_count",
        "open",
        "kept_events",
        "kept_dropped",
    ]
