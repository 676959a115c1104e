"""Assets materialize in-process on a small real archive; the correction check passes and fails.

One module for everything that needs Spark, so the session starts once (it takes
seconds to start).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from assets.constants import corrected_key, realtime_key
from assets.partitions import partition_key_for
from assets.raw import raw_archive
from assets.views.checks import CORRECTION_CHECK, build_correction_check, evaluate_correction
from orchestration.control_plane.spark.correction_job import SEGMENT_RULES_CHECK
from orchestration.definitions import corrected_assets, realtime_assets
from orchestration.resources import LocalControlStoreResource, LocalStorageResource
from pipelines.control import ControlStore
from pipelines.segments import HOUR_MS, realtime_prefix
from pipelines.serving.query import query_view
from pipelines.storage import LocalObjectStore, ObjectStore
from pipelines.tables import Tables
from pipelines.views import View
from quality.compare import Tolerance
from tests.fixtures.dagster_fixture import build_archive, copy_storage, example_views
from tests.fixtures.pipes import InProcessSparkResource
from tests.fixtures.segments import publish_batch_version, published_table
from tests.fixtures.spark import spark  # noqa: F401  (session-scoped SparkSession)

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

VIEWS = {v.name: v for v in example_views()}


@pytest.fixture
def spark_session(spark):  # noqa: F811  (the session fixture imported above)
    return spark


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """A built storage root and its event hours (2015-02-26T21..23)."""
    root = tmp_path_factory.mktemp("archive") / "storage"
    run = build_archive(root)
    return root, run.event_hours()


@pytest.fixture
def storage_root(archive, tmp_path: Path) -> Path:
    return copy_storage(archive[0], tmp_path / "storage")


def _range_tags(hours: list[int]) -> dict[str, str]:
    return {
        "dagster/asset_partition_range_start": partition_key_for(hours[0]),
        "dagster/asset_partition_range_end": partition_key_for(hours[-1]),
    }


def _asset(assets: list[dg.AssetsDefinition], key: dg.AssetKey) -> dg.AssetsDefinition:
    return next(a for a in assets if key in a.keys)


def _corrected(names: list[str]) -> dg.AssetSelection:
    return dg.AssetSelection.assets(*(corrected_key(n) for n in names))


def test_raw_archive_records_completeness_per_hour(archive, storage_root: Path) -> None:
    _, hours = archive
    assert len(hours) == 3
    result = dg.materialize(
        [raw_archive],
        resources={"storage": LocalStorageResource(root=str(storage_root))},
        tags=_range_tags(hours),
    )
    events = {
        e.materialization.partition: e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    assert set(events) == {partition_key_for(h) for h in hours}
    archived = pq.read_table(storage_root / "archive" / "events").num_rows
    assert sum(m["events"].value for m in events.values()) == archived
    for metadata in events.values():
        assert metadata["partitions"].value == [f"events-{p}" for p in range(4)]
        assert metadata["gaps"].value == {}
        assert all(r for r in metadata["offset_ranges"].value.values())
    last = events[partition_key_for(hours[-1])]
    assert not last["complete"].value  # no partition has moved past the last hour yet
    assert last["open_partitions"].value


def test_realtime_asset_deploys_the_view_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    asset = _asset(realtime_assets, realtime_key("traffic_by_org"))
    resources = {
        "control_store": LocalControlStoreResource(sqlite_url=url),
        "storage": LocalStorageResource(root=str(tmp_path / "storage")),
    }
    first = dg.materialize([asset], resources=resources)
    second = dg.materialize([asset], resources=resources)
    changed = [
        r.get_asset_materialization_events()[0].materialization.metadata["changed"].value
        for r in (first, second)
    ]
    assert changed == [True, False]
    control = ControlStore(url)
    (deployed,) = control.deployed_views()
    control.close()
    assert deployed["name"] == "traffic_by_org"
    assert deployed["fingerprint"] == VIEWS["traffic_by_org"].fingerprint
    assert deployed["definition"]["interval"] == "10m"


@pytest.mark.usefixtures("spark")
def test_corrected_assets_and_blocking_checks_for_a_range_in_one_run(
    archive, storage_root: Path
) -> None:
    _, hours = archive
    names = ["traffic_by_org", "top_clients_hourly"]
    (asset,) = corrected_assets  # one multi-asset: every view in one Spark job
    checks = [build_correction_check(VIEWS[n]) for n in names]
    empty = hours[0] - HOUR_MS  # closed, no events: materialized, nothing published
    result = dg.materialize(
        [asset, *checks],
        selection=_corrected(names),
        resources={
            "storage": LocalStorageResource(root=str(storage_root)),
            "spark": InProcessSparkResource(),
        },
        tags=_range_tags([empty, *hours]),
    )
    assert result.success
    materialized = {
        (e.materialization.asset_key, e.materialization.partition): e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    assert set(materialized) == {
        (corrected_key(n), partition_key_for(h)) for n in names for h in [empty, *hours]
    }
    for name in names:
        skipped = materialized.pop((corrected_key(name), partition_key_for(empty)))
        assert skipped["skipped"].value is True and skipped["dagster/row_count"].value == 0
    evaluations = result.get_asset_check_evaluations()
    assert {(e.asset_key, e.check_name) for e in evaluations} == {
        (corrected_key(n), check)
        for n in names
        for check in (CORRECTION_CHECK, SEGMENT_RULES_CHECK)
    }
    assert all(e.passed for e in evaluations)
    # the reconciliation check says it per hour (its partition), and once for the run
    for name in names:
        mine = [
            e
            for e in evaluations
            if e.check_name == CORRECTION_CHECK and e.asset_key == corrected_key(name)
        ]
        assert sorted(e.partition for e in mine if e.partition) == sorted(
            partition_key_for(h) for h in [empty, *hours]
        )
        (summary,) = [e for e in mine if e.partition is None]
        assert summary.metadata["hours"].value == len(hours) + 1
        assert summary.metadata["hours_failed"].value == []
    rules = [e for e in evaluations if e.check_name == SEGMENT_RULES_CHECK]
    assert all(e.metadata["segments_validated"].value == len(hours) for e in rules)
    store = LocalObjectStore(str(storage_root))
    tables = LocalStorageResource(root=str(storage_root)).open_tables()  # the run's tables
    for name in names:
        served = query_view(store, VIEWS[name], hours[0], hours[-1] + HOUR_MS, tables=tables)
        assert served.num_rows > 0
        assert set(served.column("source").to_pylist()) == {"batch v1"}
    # Dagster's standard metadata: the rows each hour published, the columns a query returns
    for event in result.get_asset_materialization_events():
        m = event.materialization
        if m.partition == partition_key_for(empty):
            continue
        view = VIEWS[m.asset_key.path[-1].removeprefix("corrected_")]
        hour = next(h for h in hours if partition_key_for(h) == m.partition)
        published = query_view(store, view, hour, hour + HOUR_MS, tables=tables).num_rows
        assert m.metadata["dagster/row_count"].value == published
    tables.close()
    spec = asset.specs_by_key[corrected_key(names[0])]
    schema = spec.metadata["dagster/column_schema"]
    columns = [c.name for c in getattr(schema, "schema", schema).columns]  # value or wrapper
    assert columns == VIEWS[names[0]].output_schema().names


def test_a_sliding_view_corrects_the_segment_before_its_run_without_failing_it(
    archive, storage_root: Path
) -> None:
    """Correcting an hour of a sliding view corrects again the earlier, already corrected
    segment its windows reach into: the run succeeds, with metadata for its own hour only."""
    _, hours = archive
    (asset,) = corrected_assets
    name = next(n for n, v in VIEWS.items() if v.is_sliding and not v.disabled)
    resources = {
        "storage": LocalStorageResource(root=str(storage_root)),
        "spark": InProcessSparkResource(),
    }
    for hour in hours[:2]:
        result = dg.materialize(
            [asset], selection=_corrected([name]), resources=resources, tags=_range_tags([hour])
        )
        assert result.success
        partitions = {
            e.materialization.partition for e in result.get_asset_materialization_events()
        }
        assert partitions == {partition_key_for(hour)}
    store = LocalObjectStore(str(storage_root))
    with LocalStorageResource(root=str(storage_root)).open_tables() as tables:
        served = query_view(store, VIEWS[name], hours[0], hours[0] + HOUR_MS, tables=tables)
    assert served.num_rows and set(served.column("source").to_pylist()) == {"batch v2"}


def _tamper(
    store: ObjectStore, tables: Tables, view: View, segment: int, column: str, factor: float
) -> None:
    """Publish a new batch version of ``segment`` with ``column`` scaled by ``factor``."""
    table = published_table(store, tables, view, segment)
    index = table.schema.get_field_index(column)
    scaled = pc.cast(
        pc.round(pc.multiply(table.column(column), factor)), table.schema.field(column).type
    )
    publish_batch_version(
        tables, view, segment, table.set_column(index, table.schema.field(column), scaled)
    )


def test_check_passes_when_realtime_agrees_and_fails_beyond_tolerance(
    spark_session, archive, storage_root: Path
) -> None:
    from pipelines.batch import correct_hours

    _, hours = archive
    view = VIEWS["traffic_by_org"]
    store = LocalObjectStore(str(storage_root))
    tables = LocalStorageResource(root=str(storage_root)).open_tables()
    correct_hours(spark_session, store, [view], hours, tables=tables)
    start, end = hours[0], hours[-1] + HOUR_MS

    agrees = evaluate_correction(store, view, start, end, tables=tables)
    assert agrees.passed
    assert agrees.metadata["groups_missing"].value + agrees.metadata["groups_extra"].value <= 3
    assert agrees.metadata["events_rel_mean"].value < 0.05
    assert agrees.metadata["failures"].value == []

    _tamper(store, tables, view, hours[1], "events", 1.5)
    differs = evaluate_correction(store, view, start, end, tables=tables)
    assert not differs.passed
    assert differs.severity == dg.AssetCheckSeverity.ERROR
    assert differs.metadata["events_rel_max"].value >= 0.3
    assert any(f.startswith("events:") for f in differs.metadata["failures"].value)
    # other metrics were untouched and still agree
    assert differs.metadata["bytes_total_rel_mean"].value < 0.05
    tables.close()


def _materialize_with_check(storage_root: Path, view: View, check, hours: list[int]):
    return dg.materialize(
        [*corrected_assets, check],
        selection=_corrected([view.name]),
        resources={
            "storage": LocalStorageResource(root=str(storage_root)),
            "spark": InProcessSparkResource(),
        },
        tags=_range_tags(hours),
        raise_on_error=False,
    )


def _correction_checks(result) -> list:
    """The check's evaluations of single hours (a range run adds one for the run)."""
    return [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == CORRECTION_CHECK and e.partition is not None
    ]


def _run_summary(result):
    (summary,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == CORRECTION_CHECK and e.partition is None
    ]
    return summary


@pytest.mark.usefixtures("spark")
def test_explained_error_beyond_the_target_warns_without_blocking(
    archive, storage_root: Path
) -> None:
    _, hours = archive
    view = VIEWS["traffic_by_org"]
    zero = build_correction_check(view, Tolerance(relative=0.0, statistic="max"))
    result = _materialize_with_check(storage_root, view, zero, hours[1:2])
    (evaluation,) = _correction_checks(result)
    # duplicates and late events make realtime inexact, but they explain all of it
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["duplicates"].value + evaluation.metadata["late_dropped"].value > 0
    assert evaluation.metadata["hours_unexplained"].value == 0
    assert result.success


@pytest.mark.usefixtures("spark")
def test_unexplained_difference_fails_the_blocking_check_and_the_run(
    archive, storage_root: Path
) -> None:
    _, hours = archive
    view = VIEWS["traffic_by_org"]
    store = LocalObjectStore(str(storage_root))
    # a task's realtime partials of the hour are lost: nothing in the archive explains it
    lost = sorted(store.list(realtime_prefix(view.name, hours[1])))[0]
    store.delete(lost)
    result = _materialize_with_check(storage_root, view, build_correction_check(view), hours[1:2])
    (evaluation,) = _correction_checks(result)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert evaluation.metadata["hours_unexplained"].value == 1
    assert "missing from realtime" in evaluation.description
    assert evaluation.partition == partition_key_for(hours[1])  # the UI names the hour
    summary = _run_summary(result)
    assert summary.severity == dg.AssetCheckSeverity.ERROR and not summary.passed
    assert summary.metadata["hours_in_error"].value == [partition_key_for(hours[1])]
    assert not result.success


@pytest.mark.usefixtures("spark")
def test_a_broken_segment_rule_fails_the_run_unpublished_without_retrying(
    archive, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import quality.schemas
    from quality.exceptions import SchemaViolation

    _, hours = archive
    view = VIEWS["traffic_by_org"]

    def broken(rows, checked: View) -> None:
        raise SchemaViolation(f"{checked.name}: column 'events' fails '>= 0' in 1 row(s)")

    monkeypatch.setattr(quality.schemas, "validate_batch_rows", broken)
    result = _materialize_with_check(storage_root, view, build_correction_check(view), hours[1:2])
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.step_failure_data.user_failure_data.description
    assert "segment rules broken" in message and "fails '>= 0'" in message
    assert result.get_asset_materialization_events() == []  # the hour is not shown as corrected
    with LocalStorageResource(root=str(storage_root)).open_tables() as tables:
        served = query_view(
            LocalObjectStore(str(storage_root)), view, hours[1], hours[1] + HOUR_MS, "batch",
            tables=tables,
        )  # fmt: skip
    assert served.num_rows == 0 and "batch v1" not in set(served.column("source").to_pylist())
    retried = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert retried == []
