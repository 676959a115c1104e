"""A topic's declaration changes under its views: what is followed (a redeploy) and what is
refused (a column's type changed, a column a deployed view uses removed)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.archive.archived import archived_types
from pipelines.archive.schema import archive_schema
from pipelines.events.declaration import ColumnType, TopicDeclaration
from pipelines.exceptions import DeclarationChangeRefused
from pipelines.segments import HOUR_MS, archive_events_key
from pipelines.storage import LocalObjectStore
from pipelines.views import parse_views
from pipelines.views.evolution import check_deployments, check_types, declared_types
from tests.fixtures.payments import FIELDS, HOUR, REVENUE, TOP_CENTS


def _declared(fields: list[dict], **more) -> TopicDeclaration:
    return TopicDeclaration.model_validate({"topic": "payments", "fields": fields, **more})


def _with(name: str, **changes) -> list[dict]:
    return [{**f, **changes} if f["name"] == name else f for f in FIELDS]


def _view(definition: dict, declaration: TopicDeclaration):
    (view,) = parse_views([definition], topics={"payments": declaration})
    return view


def test_the_fingerprint_covers_the_declaration() -> None:
    before = _view(REVENUE, _declared(FIELDS))
    added = _view(
        REVENUE, _declared([*FIELDS, {"name": "fee", "type": "double", "nullable": True}])
    )
    retyped = _view(REVENUE, _declared(_with("cents", type="double")))
    nullable = _view(REVENUE, _declared(_with("merchant", nullable=True)))
    assert len({v.fingerprint for v in (before, added, retyped, nullable)}) == 4
    # what only describes the topic leaves every view as it is
    reworded = _declared(_with("amount", doc="in euros"), description="card payments")
    assert _view(REVENUE, reworded).fingerprint == before.fingerprint
    assert _view(REVENUE, _declared(FIELDS)).fingerprint == before.fingerprint


def test_a_changed_type_is_refused_naming_the_column_and_both_types() -> None:
    before = declared_types([_view(REVENUE, _declared(FIELDS))])
    after = declared_types([_view(REVENUE, _declared(_with("cents", type="string")))])
    with pytest.raises(DeclarationChangeRefused) as refused:
        check_types(before, after, "the views this agent runs")
    message = str(refused.value)
    assert "a declared column's type cannot change" in message
    assert "topic 'payments': column 'cents' is long in the views this agent runs, " in message
    assert "declared string now" in message


def test_added_and_removed_columns_and_nullability_are_followed() -> None:
    before = declared_types([_view(REVENUE, _declared(FIELDS))])
    added = [*FIELDS, {"name": "fee", "type": "double"}]  # a required one too
    for fields in (added, FIELDS[:2], _with("amount", nullable=True)):
        check_types(before, declared_types([_view(REVENUE, _declared(fields))]), "before")
    other_topic = {"orders": {"cents": ColumnType.STRING}}
    check_types(before, other_topic, "before")  # another topic's columns are its own


def test_removing_a_column_a_deployed_view_uses_is_refused() -> None:
    deployed = [
        {"name": "revenue", "definition": REVENUE},
        {"name": "top_cents", "definition": TOP_CENTS},
        {"name": "elsewhere", "definition": {**TOP_CENTS, "name": "elsewhere", "topic": "x"}},
    ]
    without_cents = _declared(FIELDS[:2])
    with pytest.raises(DeclarationChangeRefused) as refused:
        check_deployments(deployed, {"payments": without_cents})
    message = str(refused.value)
    assert "deployed views no longer read with it" in message
    assert "deployed view top_cents" in message and "cents" in message
    assert "deployed view revenue" not in message
    check_deployments(deployed[:1], {"payments": without_cents})  # no view uses it: followed
    check_deployments(deployed, {"payments": _declared(FIELDS)})


def _archive(store: LocalObjectStore, hour: int, declaration: TopicDeclaration, first: int) -> None:
    schema = archive_schema(declaration)
    table = pa.table({f.name: pa.nulls(0, f.type) for f in schema}, schema)
    path = Path(store.root) / archive_events_key(hour, declaration.topic, 0, first, first + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_the_archive_says_the_types_of_its_newest_hour(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert archived_types(store, "payments") is None
    _archive(store, HOUR, _declared(FIELDS), 0)
    _archive(store, HOUR + HOUR_MS, _declared(_with("cents", type="double")), 1)
    _archive(store, HOUR + 2 * HOUR_MS, _declared(FIELDS).model_copy(update={"topic": "x"}), 2)
    found = archived_types(store, "payments")
    assert found == {
        "event_time": ColumnType.TIMESTAMP,
        "merchant": ColumnType.STRING,
        "amount": ColumnType.DOUBLE,
        "cents": ColumnType.DOUBLE,
    }
