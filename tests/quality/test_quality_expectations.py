"""Great-expectations suites of the corrected views: pass on clean corrections, fail on broken ones.

The data is real: generated traffic streamed through real tasks (12 full hours of event time,
2015-02-26T22 .. 2015-02-27T08, plus partial first and last hours), corrected by Spark up to
the hours the tests check, so the row-count bounds are learned from real published segments.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from assets.partitions import partition_key_for
from assets.views.expectation_checks import (
    EXPECTATIONS_CHECK,
    build_expectation_check,
    build_expectation_checks,
    evaluate_expectations,
)
from assets.views.factory import build_corrected_assets
from orchestration.control_plane.spark.correction_job import SEGMENT_RULES_CHECK
from orchestration.resources import LocalStorageResource
from pipelines.batch import archive_hours, correct_hours
from pipelines.config import PROJECT_ROOT, get_settings
from pipelines.exceptions import ConfigError, QueryError
from pipelines.generator import GeneratorOptions
from pipelines.segments import HOUR_MS
from pipelines.serving.query import query_view
from pipelines.storage import LocalObjectStore, ObjectStore
from pipelines.tables import Tables, TablesConfig, ViewTables
from pipelines.testing import StreamRun, run_stream
from pipelines.views import View, parse_views
from quality.config import ExpectationSettings
from quality.expectations import (
    CRITICAL,
    WARNING,
    SuiteResult,
    build_suite,
    expected_windows,
    learn_row_bounds,
    validate_table,
    validate_view,
)
from tests.fixtures.dagster_fixture import copy_storage, example_views
from tests.fixtures.pipes import InProcessSparkResource
from tests.fixtures.segments import publish_batch_version, published_table
from tests.fixtures.spark import spark  # noqa: F401  (session-scoped SparkSession)
from tests.fixtures.tables import copy_tables, local_tables

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

TEST_VIEWS = [
    {
        # Both distinct kinds next to a count, unordered quantiles, 5-minute windows.
        "name": "clients_5m",
        "topic": "events",
        "grouping_cols": ["event_type"],
        "interval": "5m",
        "aggregation_info": [
            {"aggregation": "count", "aggregated_col_name": "events"},
            {
                "aggregation": "count_distinct",
                "col_name": "client",
                "aggregated_col_name": "clients",
            },
            {
                "aggregation": "approx_count_distinct",
                "col_name": "session_id",
                "aggregated_col_name": "sessions",
            },
            {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes_total"},
            {
                "aggregation": "quantiles",
                "col_name": "bytes_tx",
                "aggregated_col_name": "bytes",
                "params": {"quantiles": [0.99, 0.5, 0.95]},
            },
        ],
    },
    {
        # Windows longer than an hour: segments of two hours.
        "name": "all_2h",
        "topic": "events",
        "grouping_cols": [],
        "interval": "2h",
        "aggregation_info": [
            {"aggregation": "count", "aggregated_col_name": "events"},
            {"aggregation": "max", "col_name": "bytes_tx", "aggregated_col_name": "bytes_max"},
        ],
    },
]
OPTIONS = GeneratorOptions(max_events=5000, peak_rate=20000.0, speedup=720.0)
"""2015-02-26T21:37 .. 2015-02-27T09:07 of event time, 150 to 1,200 events per hour."""
SETTINGS = ExpectationSettings()


def all_views() -> dict[str, View]:
    windowed = [v for v in example_views() if not v.is_session]  # suites: windows only
    views = [*windowed, *parse_views(TEST_VIEWS)]
    return {v.name: v for v in views}


VIEWS = all_views()


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> StreamRun:
    root = tmp_path_factory.mktemp("expectations") / "storage"
    return run_stream(root, list(VIEWS.values()), options=OPTIONS)


@pytest.fixture(scope="module")
def tables(streamed: StreamRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ViewTables]:
    tables = local_tables(streamed.store.root, tmp_path_factory.mktemp("catalog") / "cat.db")
    yield tables
    tables.close()


@pytest.fixture(scope="module")
def corrected(spark, streamed: StreamRun, tables: ViewTables) -> StreamRun:  # noqa: F811
    # The hours the tests check and everything before them (history); not the last five.
    hours = archive_hours(streamed.store)[:8]
    correct_hours(spark, streamed.store, streamed.views, hours, tables=tables)
    return streamed


@pytest.fixture(scope="module")
def hours(streamed: StreamRun) -> list[int]:
    hours = streamed.event_hours()
    assert len(hours) == 13  # a partial hour, 12 full ones, a partial one
    return hours


def corrected_table(store: ObjectStore, tables: Tables, view: View, hour: int) -> pa.Table:
    table = query_view(store, view, hour, hour + HOUR_MS, prefer="batch", tables=tables)
    assert table.num_rows and set(table.column("source").to_pylist()) == {"batch v1"}
    return table


def one_row_per_window(table: pa.Table) -> pa.Table:
    starts = table.column("window_start").to_pylist()
    return table.take([i for i, s in enumerate(starts) if i == 0 or starts[i - 1] != s])


def only_failure(result: SuiteResult):
    assert not result.success
    assert len(result.failed) == 1, [o.describe() for o in result.failed]
    return result.failed[0]


# --- the suite follows the view --------------------------------------------------------------


def rules(view: View) -> list[tuple[str, tuple[str, ...]]]:
    suite = build_suite(view, 0, HOUR_MS)
    return [(e.expectation_type, tuple(sorted(_columns(e)))) for e in suite.expectations]


def _columns(expectation) -> list[str]:
    kwargs = expectation.configuration.kwargs
    return [kwargs[k] for k in ("column", "column_A", "column_B") if k in kwargs]


def test_suites_are_derived_from_the_view_definitions() -> None:
    clients = rules(VIEWS["clients_5m"])
    pairs = [cols for kind, cols in clients if "pair" in kind]
    assert sorted(pairs) == [
        ("bytes_p50", "bytes_p95"),
        ("bytes_p95", "bytes_p99"),
        ("clients", "events"),
        ("events", "sessions"),
    ]
    non_negative = {cols[0] for kind, cols in clients if kind.endswith("to_be_between")}
    assert non_negative == {
        "events",
        "clients",
        "sessions",
        "bytes_total",
        "bytes_p50",
        "bytes_p95",
        "bytes_p99",
    }
    traffic = {cols[0] for kind, cols in rules(VIEWS["traffic_by_org"]) if "between" in kind}
    assert traffic == {"events", "bytes_total", "bytes_mean", "bytes_min", "bytes_max"}
    # a distinct count without a row count is compared with nothing
    assert not [k for k, _ in rules(VIEWS["sessions_by_org"]) if "pair" in k]
    # top_k and first/last of a string say nothing about signs
    hourly = {cols for _, cols in rules(VIEWS["top_clients_hourly"])}
    assert ("top_clients",) not in hourly and ("first_type",) not in hourly
    suite = build_suite(VIEWS["clients_5m"], 0, HOUR_MS)
    assert {str(e.severity.value) for e in suite.expectations} == {CRITICAL}


def test_windows_are_those_of_the_whole_segments() -> None:
    assert len(expected_windows(VIEWS["bytes_quantiles_by_type"], 0, 2 * HOUR_MS)) == 120
    assert expected_windows(VIEWS["traffic_by_org"], 0, HOUR_MS)[-1] == 50 * 60_000
    # an odd hour of a two-hour view is checked as its whole segment: one window
    assert expected_windows(VIEWS["all_2h"], 3 * HOUR_MS, 4 * HOUR_MS) == [2 * HOUR_MS]
    with pytest.raises(QueryError, match="end 5 is not after start 7"):
        expected_windows(VIEWS["all_2h"], 7, 5)


def test_settings_come_from_the_environment_and_bad_values_are_named(monkeypatch) -> None:
    assert (SETTINGS.rows_history_hours, SETTINGS.rows_min_history) == (24, 3)
    assert SETTINGS.rows_factor == 3.0
    monkeypatch.setenv("SLUICE_EXPECT_ROWS_FACTOR", "1.5")
    assert ExpectationSettings.from_env().rows_factor == 1.5
    monkeypatch.setenv("SLUICE_EXPECT_ROWS_FACTOR", "0.5")
    monkeypatch.setenv("SLUICE_EXPECT_ROWS_HISTORY_HOURS", "soon")
    with pytest.raises(ConfigError) as error:
        ExpectationSettings.from_env()
    assert "SLUICE_EXPECT_ROWS_FACTOR='0.5'" in str(error.value)
    assert "SLUICE_EXPECT_ROWS_HISTORY_HOURS='soon'" in str(error.value)


# --- clean corrections pass ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_suites_pass_on_clean_corrected_data(
    corrected: StreamRun, hours, name: str, tables
) -> None:
    view = VIEWS[name]
    result = validate_view(corrected.store, view, hours[6], hours[8], SETTINGS, tables=tables)
    assert result.success, [o.describe() for o in result.failed]
    bounds = result.row_bounds
    assert bounds is not None and bounds.learned
    assert len(bounds.history) >= 3 and bounds.low <= result.rows <= bounds.high
    kinds = {o.expectation for o in result.outcomes}
    assert "expect_table_row_count_to_be_between" in kinds
    assert "expect_column_distinct_values_to_contain_set" in kinds
    assert result.seconds < 10


def test_too_little_history_adds_no_row_bound_and_says_so(
    corrected: StreamRun, hours, tables
) -> None:
    view = VIEWS["traffic_by_org"]
    result = validate_view(corrected.store, view, hours[1], hours[2], SETTINGS, tables=tables)
    assert result.success
    assert "expect_table_row_count_to_be_between" not in {o.expectation for o in result.outcomes}
    assert result.notes == [
        "1 published segment(s) in the 24 h before 2015-02-26T22 (need 3): no row-count bound"
    ]


def test_a_partial_hour_misses_windows_and_names_them(corrected: StreamRun, hours, tables) -> None:
    # The traffic starts at 21:37: the windows before it do not exist.
    result = validate_view(
        corrected.store, VIEWS["traffic_by_org"], hours[0], hours[1], SETTINGS, tables=tables
    )
    missing = only_failure(result)
    assert missing.expectation == "expect_column_distinct_values_to_contain_set"
    assert missing.columns == ("window_start",) and missing.severity == CRITICAL
    assert missing.unexpected_count == 3
    assert missing.sample == ["2015-02-26T21:00", "2015-02-26T21:10", "2015-02-26T21:20"]


def test_hours_without_archived_events_are_not_checked(corrected: StreamRun, hours, tables) -> None:
    """A closed hour nobody sent events in is empty by right: no window is expected there
    (automation corrects the whole day, the hours before a replay began included)."""
    view = VIEWS["traffic_by_org"]
    result = validate_view(
        corrected.store, view, hours[0] - 2 * HOUR_MS, hours[1], SETTINGS, tables=tables
    )
    assert result.empty_segments == 2
    assert "2 segment(s) without archived events not checked" in result.notes
    missing = only_failure(result)  # the partial first hour still, and only it
    assert missing.unexpected_count == 3
    nothing = validate_view(
        corrected.store, view, hours[0] - 2 * HOUR_MS, hours[0], SETTINGS, tables=tables
    )
    assert nothing.success and nothing.rows == 0 and nothing.empty_segments == 2


def test_the_realtime_values_have_the_same_shape(streamed: StreamRun, hours, tables) -> None:
    result = validate_view(
        streamed.store,
        VIEWS["clients_5m"],
        hours[3],
        hours[4],
        SETTINGS,
        prefer="realtime",
        tables=tables,
    )
    assert result.success, [o.describe() for o in result.failed]


# --- broken corrections fail the expectation they break --------------------------------------


def _set(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    index = table.schema.get_field_index(column)
    return table.set_column(index, table.schema.field(column), pa.array(values, table[column].type))


def _validate(tables: Tables, view: View, hour: int, table: pa.Table) -> SuiteResult:
    bounds = learn_row_bounds(tables, view, hour, hour + HOUR_MS, SETTINGS)
    assert bounds.learned
    return validate_table(view, table, hour, hour + HOUR_MS, bounds, SETTINGS)


def test_a_removed_window_fails_completeness(corrected: StreamRun, hours, tables) -> None:
    view, hour = VIEWS["clients_5m"], hours[6]
    table = corrected_table(corrected.store, tables, view, hour)
    gone = hour + 15 * 60_000
    starts = pc.cast(table.column("window_start"), pa.int64())
    broken = table.filter(pc.not_equal(starts, gone))
    failure = only_failure(_validate(tables, view, hour, broken))
    assert failure.rule == "all 12 windows of 2015-02-27T03:00 .. 2015-02-27T04:00 are present"
    assert failure.sample == ["2015-02-27T03:15"] and failure.columns == ("window_start",)


def test_a_negative_count_fails_non_negativity(corrected: StreamRun, hours, tables) -> None:
    view, hour = VIEWS["traffic_by_org"], hours[6]
    broken = _set(corrected_table(corrected.store, tables, view, hour), "events", 4, -1)
    failure = only_failure(_validate(tables, view, hour, broken))
    assert (failure.rule, failure.columns, failure.unexpected_count) == (
        "events >= 0",
        ("events",),
        1,
    )
    (row,) = failure.sample
    assert row["events"] == -1 and row["org"] == broken.column("org")[4].as_py()
    assert row["window_start"].startswith("2015-02-27T03:")


def test_distinct_above_count_fails_the_pair(corrected: StreamRun, hours, tables) -> None:
    view, hour = VIEWS["clients_5m"], hours[6]
    table = corrected_table(corrected.store, tables, view, hour)
    broken = _set(table, "clients", 2, table.column("events")[2].as_py() + 1)
    failure = only_failure(_validate(tables, view, hour, broken))
    assert failure.rule == "clients <= events"
    assert failure.columns == ("events", "clients") and failure.unexpected_count == 1


def test_quantiles_out_of_order_fail(corrected: StreamRun, hours, tables) -> None:
    view, hour = VIEWS["clients_5m"], hours[6]
    table = corrected_table(corrected.store, tables, view, hour)
    row = next(i for i, p50 in enumerate(table.column("bytes_p50").to_pylist()) if p50 > 1)
    broken = _set(table, "bytes_p95", row, table.column("bytes_p50")[row].as_py() / 2)
    failure = only_failure(_validate(tables, view, hour, broken))
    assert failure.rule == "bytes_p50 <= bytes_p95"
    assert failure.columns == ("bytes_p95", "bytes_p50") and failure.severity == CRITICAL


def test_a_row_count_far_outside_the_learned_bounds_warns(
    corrected: StreamRun, hours, tables
) -> None:
    view, hour = VIEWS["clients_5m"], hours[6]
    table = corrected_table(corrected.store, tables, view, hour)
    broken = one_row_per_window(table)  # every window, few rows
    result = _validate(tables, view, hour, broken)
    failure = only_failure(result)
    assert failure.expectation == "expect_table_row_count_to_be_between"
    assert failure.severity == WARNING and failure.observed == 12
    assert not result.hard_failures
    assert result.row_bounds.low > 12


def test_a_missing_metric_column_fails_naming_it(corrected: StreamRun, hours, tables) -> None:
    view, hour = VIEWS["traffic_by_org"], hours[6]
    broken = corrected_table(corrected.store, tables, view, hour).drop(["bytes_max"])
    failure = only_failure(_validate(tables, view, hour, broken))
    assert failure.columns == ("bytes_max",)
    assert 'The column "bytes_max"' in failure.error and "does not exist" in failure.error


# --- the Dagster asset check -----------------------------------------------------------------


def test_the_check_runs_after_the_correction_and_records_the_suite(
    corrected: StreamRun, hours, tmp_path: Path, tables
) -> None:
    view = VIEWS["clients_5m"]
    root = copy_storage(Path(corrected.store.root), tmp_path / "storage")
    shutil.rmtree(root / "tables")  # the copy's tables are its own catalog's: the settings'
    with ViewTables(TablesConfig.from_settings(get_settings(), str(root))) as copied:
        copy_tables(tables, copied, [view])
    result = dg.materialize(
        [
            build_corrected_assets([view], {d["name"]: d for d in TEST_VIEWS}),
            build_expectation_check(view, SETTINGS),
        ],
        resources={
            "storage": LocalStorageResource(root=str(root)),
            "spark": InProcessSparkResource(),
        },
        tags={
            "dagster/asset_partition_range_start": partition_key_for(hours[6]),
            "dagster/asset_partition_range_end": partition_key_for(hours[6]),
        },
    )
    assert result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks[SEGMENT_RULES_CHECK].passed  # the Spark job's, reported through Pipes
    evaluation = checks[EXPECTATIONS_CHECK]
    assert evaluation.passed
    metadata = {k: v.value for k, v in evaluation.metadata.items()}
    assert metadata["expectations_failed"] == 0 and metadata["failed"] == []
    assert metadata["segments"] == "2015-02-27T03 .. 2015-02-27T03"
    assert metadata["row_bounds"]["learned"] and metadata["validation_seconds"] > 0
    results = metadata["results"]
    assert len(results) == metadata["expectations"] >= 10
    assert {"rule": "clients <= events", "columns": ["events", "clients"]}.items() <= results[
        [r["rule"] for r in results].index("clients <= events")
    ].items()
    assert all(r["success"] for r in results)


def test_the_check_fails_with_error_or_warns_by_what_broke(
    corrected: StreamRun, hours, tmp_path: Path, tables: ViewTables
) -> None:
    view, hour = VIEWS["clients_5m"], hours[6]
    root = copy_storage(Path(corrected.store.root), tmp_path / "storage")
    shutil.rmtree(root / "tables")
    store = LocalObjectStore(str(root))
    copied = local_tables(root, tmp_path / "cat.db")
    copy_tables(tables, copied, [view])
    table = published_table(store, copied, view, hour)

    publish_batch_version(copied, view, hour, _set(table, "bytes_total", 0, -10.0))
    broken = evaluate_expectations(store, view, hour, hour + HOUR_MS, SETTINGS, tables=copied)
    assert not broken.passed and broken.severity == dg.AssetCheckSeverity.ERROR
    assert broken.metadata["failed_columns"].value == ["bytes_total"]
    assert broken.description.startswith("1 of ") and "bytes_total >= 0 [bytes_total]" in (
        broken.description
    )

    publish_batch_version(copied, view, hour, one_row_per_window(table))
    sparse = evaluate_expectations(store, view, hour, hour + HOUR_MS, SETTINGS, tables=copied)
    assert not sparse.passed and sparse.severity == dg.AssetCheckSeverity.WARN
    assert sparse.metadata["failed_warnings"].value == 1
    assert sparse.metadata["failed_errors"].value == 0
    copied.close()


def test_one_non_blocking_check_per_enabled_view() -> None:
    views = list(VIEWS.values())
    disabled = replace(views[0], name="off", disabled=True)
    checks = build_expectation_checks([*views, disabled], SETTINGS)
    specs = [spec for check in checks for spec in check.check_specs]
    assert [s.asset_key.path[0] for s in specs] == [f"corrected_{v.name}" for v in views]
    assert {s.name for s in specs} == {EXPECTATIONS_CHECK}
    assert not any(s.blocking for s in specs)


def _in_a_fresh_interpreter(script: str) -> None:
    """Run ``script`` in a new interpreter, where nothing is imported yet; it prints ok."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_only_processes_that_check_import_great_expectations():
    """Importing the modules that hold suites (stream workers, the CLI, Dagster's code
    location) does not import great-expectations; building a suite does, and running one
    needs no context made beforehand (a fresh interpreter: pytest's has it loaded)."""
    script = """
import sys
import orchestration.cli, pipelines.stream.worker, pipelines.aggregators
import quality.expectations, quality.schemas, quality.reconcile, assets.views.expectation_checks
assert "great_expectations" not in sys.modules, "imported great_expectations"
import pyarrow as pa
from pipelines.views import parse_views
from quality.expectations import validate_table
view = parse_views([{"name": "v", "topic": "events", "grouping_cols": [], "interval": "30m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "events"}]}])[0]
rows = pa.table({"window_start": [0, 1_800_000], "events": [3, -1]})
result = validate_table(view, rows, 0, 3_600_000)
assert "great_expectations" in sys.modules
assert [o.rule for o in result.failed] == ["events >= 0"], [o.describe() for o in result.failed]
print("ok")
"""
    _in_a_fresh_interpreter(script)
