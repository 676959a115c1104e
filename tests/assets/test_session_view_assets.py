"""A session view gets realtime and corrected assets like a windowed view: materializing the
realtime asset deploys its definition, which resolves back to the same session view."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.constants import corrected_key, realtime_key
from assets.views.factory import build_view_assets
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from pipelines.control import ControlStore
from pipelines.views import parse_views
from pipelines.views.resolve import resolve_views

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

DEFINITION = {
    "name": "visits",
    "kind": "session",
    "topic": "events",
    "gap": "20m",
    "max_duration": "2h",
    "kept_fields": ["event_type"],
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "events"}],
}


def test_realtime_and_corrected_assets_of_a_session_view(tmp_path):
    (view,) = parse_views([DEFINITION])
    realtime, corrected = build_view_assets([view], {"visits": DEFINITION})
    (asset,) = realtime
    assert asset.key == realtime_key("visits")
    spec = asset.specs_by_key[realtime_key("visits")]
    assert spec.metadata["session_key"] == "session_id"
    assert (spec.metadata["gap"], spec.metadata["max_duration"]) == ("20m", "2h")
    columns = {c.name: c.description for c in spec.metadata["dagster/column_schema"].columns}
    assert columns["session_id"] == "session key" and columns["events"] == "metric"
    (multi,) = corrected
    assert corrected_key("visits") in multi.keys

    url = f"sqlite:///{tmp_path / 'control.db'}"
    result = dg.materialize(
        [asset],
        resources={
            "control_store": LocalControlStoreResource(sqlite_url=url),
            "storage": LocalStorageResource(root=str(tmp_path / "storage")),
        },
    )
    assert result.success
    control = ControlStore(url)
    try:
        deployments = control.deployed_views()
    finally:
        control.close()
    resolved = resolve_views([], 0.0, "none", deployments)["visits"]
    assert resolved.view.is_session and resolved.view.fingerprint == view.fingerprint
