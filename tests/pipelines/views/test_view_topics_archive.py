"""Any declared columns, types, nullability, record columns (headers included) and id (or none)
are accepted at load: the archive holds them all."""

from __future__ import annotations

import pytest

from pipelines.events.declaration import TimeFormat
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


def test_a_declaration_of_the_archives_columns_read_from_nested_json_is_accepted() -> None:
    (view,) = parse_views({"topics": [nested()], "views": [VIEW]})
    assert view.declaration is not None and view.declaration.topic == "payments"
    assert view.declaration.event_time.format is TimeFormat.ISO8601


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["fields"].append({"name": "amount", "type": "double"}),
        lambda d: d["fields"][3].update(type="double"),
        lambda d: d["fields"].append({"name": "refunded", "type": "boolean", "nullable": True}),
        lambda d: d["fields"][2].update(nullable=True),
        lambda d: d.update(on_type_error="null"),
        lambda d: d.update(id=None),
        lambda d: d.update(id="session_id"),
        lambda d: d.update(record={"key": "card", "partition": "p", "offset": "at"}),
        lambda d: d.update(record={"timestamp": "sent"}),
        lambda d: d.update(record={"key": "card", "headers": {"trace": "trace-id"}}),
    ],
)
def test_other_columns_nulls_and_ids_are_accepted(change) -> None:
    declaration = nested()
    change(declaration)
    views, problems = check_views({"topics": [declaration], "views": [VIEW]})
    assert problems == []
    assert [v.name for v in views] == ["n"]
