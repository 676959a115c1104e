"""Deploying a view (``realtime_<view>``) refuses a declaration change that its topic's archive
or the other deployed views cannot follow: the asset fails with the reason, and what was
deployed stays."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from assets.views.factory import build_realtime_asset
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from pipelines.archive.schema import archive_schema
from pipelines.control import ControlStore
from pipelines.events.declaration import TopicDeclaration
from pipelines.segments import archive_events_key
from pipelines.views import parse_views
from tests.fixtures.payments import FIELDS, HOUR, REVENUE, TOP_CENTS


def _declared(fields: list[dict]) -> TopicDeclaration:
    return TopicDeclaration.model_validate({"topic": "payments", "fields": fields})


def _with(name: str, **changes) -> list[dict]:
    return [{**f, **changes} if f["name"] == name else f for f in FIELDS]


def _deploy(tmp_path: Path, definition: dict, fields: list[dict]) -> dg.ExecuteInProcessResult:
    (view,) = parse_views([definition], topics={"payments": _declared(fields)})
    resources = {
        "control_store": LocalControlStoreResource(sqlite_url=f"sqlite:///{tmp_path / 'c.db'}"),
        "storage": LocalStorageResource(root=str(tmp_path / "storage")),
    }
    return dg.materialize(
        [build_realtime_asset(view, definition)], resources=resources, raise_on_error=False
    )


def _deployed(tmp_path: Path) -> dict[str, str]:
    control = ControlStore(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        return {d["name"]: d["fingerprint"] for d in control.deployed_views()}
    finally:
        control.close()


def _failure(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    (event,) = [e for e in result.all_events if e.is_step_failure]
    return event.step_failure_data.error.message


def _archive(tmp_path: Path, fields: list[dict]) -> None:
    schema = archive_schema(_declared(fields))
    table = pa.table({f.name: pa.nulls(0, f.type) for f in schema}, schema)
    path = tmp_path / "storage" / archive_events_key(HOUR, "payments", 0, 0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_a_type_changed_since_the_archive_is_refused_and_the_deployment_stays(tmp_path) -> None:
    assert _deploy(tmp_path, REVENUE, FIELDS).success
    first = _deployed(tmp_path)
    _archive(tmp_path, FIELDS)
    message = _failure(_deploy(tmp_path, REVENUE, _with("amount", type="long")))
    assert "view revenue not deployed: declaration change refused" in message
    assert "column 'amount' is double in the archive's newest hour, declared long now" in message
    assert _deployed(tmp_path) == first


def test_an_added_field_redeploys_the_view(tmp_path) -> None:
    assert _deploy(tmp_path, REVENUE, FIELDS).success
    first = _deployed(tmp_path)
    _archive(tmp_path, FIELDS)
    added = [*FIELDS, {"name": "fee", "type": "double"}]
    assert _deploy(tmp_path, REVENUE, added).success
    assert _deployed(tmp_path)["revenue"] != first["revenue"]


def test_removing_a_column_another_deployed_view_uses_is_refused(tmp_path) -> None:
    assert _deploy(tmp_path, TOP_CENTS, FIELDS).success
    assert _deploy(tmp_path, REVENUE, FIELDS).success
    first = _deployed(tmp_path)
    message = _failure(_deploy(tmp_path, REVENUE, FIELDS[:2]))
    assert "deployed views no longer read with it" in message
    assert "deployed view top_cents" in message and "cents" in message
    assert _deployed(tmp_path) == first
