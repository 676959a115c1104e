"""The boundary schemas accept what the real writers produce and reject each kind of bad data.

Good data comes from generated traffic streamed through real stream tasks (archive, dead
letters, realtime segments) and from ``query_view`` over them; bad data is that same data
broken one way at a time, and each rejection must name the column, the check and the value.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.partitions import partition_key_for
from assets.raw import raw_archive
from assets.raw.archive_checks import (
    ARCHIVE_SCHEMA_CHECK,
    build_archive_schema_check,
    evaluate_archive_schema,
    read_archive_hour,
)
from orchestration.resources import LocalStorageResource
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.decode import DEAD_LETTER_REASONS
from pipelines.generator import GeneratorOptions
from pipelines.segments import (
    HOUR_MS,
    archive_events_key,
    hour_label,
    realtime_prefix,
    state_column,
)
from pipelines.storage import LocalObjectStore
from pipelines.testing import StreamRun, run_stream
from pipelines.views import View, parse_views
from quality.exceptions import QualityError, SchemaViolation
from quality.schemas import (
    SegmentKind,
    corrected_schema,
    segment_spec,
    validate_archive_events,
    validate_dead_letters,
    validate_segment,
)
from tests.fixtures.dagster_fixture import example_views
from tests.fixtures.tables import query_realtime

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

NO_GROUPS = {
    # No grouping column, 2h windows, first/last of an int column (they keep its range).
    "name": "all_2h",
    "topic": "events",
    "grouping_cols": [],
    "interval": "2h",
    "aggregation_info": [
        {"aggregation": "count", "aggregated_col_name": "events"},
        {"aggregation": "first", "col_name": "bytes_tx", "aggregated_col_name": "first_bytes"},
        {"aggregation": "last", "col_name": "bytes_tx", "aggregated_col_name": "last_bytes"},
        {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes_total"},
    ],
}
OPTIONS = GeneratorOptions(
    max_events=3000,
    peak_rate=20000.0,
    duplicate_share=0.03,  # duplicate event_ids are legal in the archive
    malformed_share=0.03,
    warmup_events=200,
)


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> StreamRun:
    windowed = [v for v in example_views() if not v.is_session]  # schemas: windows only
    views = [*windowed, *parse_views([NO_GROUPS])]
    return run_stream(tmp_path_factory.mktemp("schemas") / "storage", views, options=OPTIONS)


@pytest.fixture(scope="module")
def hours(streamed: StreamRun) -> list[int]:
    return streamed.event_hours()


@pytest.fixture(scope="module")
def events(streamed: StreamRun, hours: list[int]) -> pd.DataFrame:
    tables = [read_archive_hour(streamed.store, h)[0] for h in hours]
    return pa.concat_tables([t for t in tables if t is not None]).to_pandas()


@pytest.fixture(scope="module")
def dead_letters(streamed: StreamRun) -> pd.DataFrame:
    keys = streamed.store.list("archive/dead_letters/")
    tables = [pq.read_table(io.BytesIO(streamed.store.get(k))) for k in keys]
    return pa.concat_tables(tables).to_pandas()


def _declared(streamed: StreamRun) -> TopicDeclaration:
    """The generator's topic's declaration, as the views read it."""
    declaration = streamed.views[0].declaration
    assert declaration is not None
    return declaration


def _validate_events(streamed: StreamRun) -> Callable[[pd.DataFrame], object]:
    return lambda frame: validate_archive_events(frame, _declared(streamed))


def _view(streamed: StreamRun, name: str) -> View:
    return next(v for v in streamed.views if v.name == name)


def _rejected(validate: Callable[[pd.DataFrame], object], frame: pd.DataFrame) -> str:
    with pytest.raises(SchemaViolation) as caught:
        validate(frame)
    return str(caught.value)


# --- good data ------------------------------------------------------------------------------


def test_archived_events_match_including_duplicate_event_ids(
    streamed: StreamRun, events: pd.DataFrame
) -> None:
    checked = validate_archive_events(events, _declared(streamed))
    assert len(checked) == len(streamed.valid_messages())
    assert checked["event_id"].duplicated().sum() > 0  # duplicate deliveries are archived


def test_dead_letters_match_with_the_decoder_reasons(dead_letters: pd.DataFrame) -> None:
    checked = validate_dead_letters(dead_letters)
    reasons = set(checked["reason"])
    assert len(reasons) >= 3
    assert reasons <= set(DEAD_LETTER_REASONS)


def test_realtime_segments_of_every_view_match(streamed: StreamRun, hours: list[int]) -> None:
    checked = 0
    for view in streamed.views:
        for segment in sorted({view.segment_start(h) for h in hours}):
            for key in streamed.store.list(realtime_prefix(view.name, segment)):
                table = pq.read_table(io.BytesIO(streamed.store.get(key)))
                assert len(validate_segment(view, table)) == table.num_rows
                checked += 1
    assert checked >= len(streamed.views) * 4


def test_query_results_of_every_view_match(streamed: StreamRun, hours: list[int]) -> None:
    for view in streamed.views:
        served = query_realtime(streamed.store, view, hours[0], hours[-1] + HOUR_MS)
        assert served.num_rows > 0
        assert len(validate_segment(view, served)) == served.num_rows


# --- bad archived events ------------------------------------------------------------------------


def _null_org(f: pd.DataFrame) -> None:
    f.loc[3, "org"] = None


def _negative_bytes(f: pd.DataFrame) -> None:
    f.loc[4, "bytes_tx"] = -5


def _partition_as_int64(f: pd.DataFrame) -> None:
    f["partition"] = f["partition"].astype("int64")


def _bytes_as_text(f: pd.DataFrame) -> None:
    f["bytes_tx"] = f["bytes_tx"].astype(str)


def _repeated_offset(f: pd.DataFrame) -> None:
    f.loc[5, ["partition", "offset"]] = f.loc[6, ["partition", "offset"]].to_numpy()


def _future_event_time(f: pd.DataFrame) -> None:
    f.loc[7, "event_time"] = 4_200_000_000_000


def _empty_event_id(f: pd.DataFrame) -> None:
    f.loc[8, "event_id"] = ""


def _negative_offset(f: pd.DataFrame) -> None:
    f.loc[9, "offset"] = -1


def _missing_column(f: pd.DataFrame) -> None:
    del f["session_id"]


def _extra_column(f: pd.DataFrame) -> None:
    f["note"] = "x"


@pytest.mark.parametrize(
    ("breaks", "expected"),
    [
        (_null_org, ["column 'org' fails not-null in 1 row(s)", "rows 3"]),
        (_negative_bytes, ["column 'bytes_tx' fails '>= 0' in 1 row(s)", "-5"]),
        (_partition_as_int64, ["column 'partition' fails dtype('int32')", "got 'int64'"]),
        (_bytes_as_text, ["column 'bytes_tx' fails dtype('int64')", "got 'object'"]),
        (_repeated_offset, ["columns (topic, partition, offset) fail 'unique'", "2 row(s)"]),
        (_future_event_time, ["column 'event_time' fails '< 4102444800000'", "4200000000000"]),
        (_empty_event_id, ["column 'event_id' fails 'non-empty' in 1 row(s)", "''"]),
        (_negative_offset, ["column 'offset' fails '>= 0'", "-1"]),
        (_missing_column, ["column 'session_id' is missing"]),
        (_extra_column, ["column 'note' is not in the schema"]),
    ],
    ids=lambda p: p.__name__.strip("_") if callable(p) else "",
)
def test_archived_events_reject_each_kind_of_bad_data(
    streamed: StreamRun,
    events: pd.DataFrame,
    breaks: Callable[[pd.DataFrame], None],
    expected: list[str],
) -> None:
    frame = events.head(50).copy()
    breaks(frame)
    message = _rejected(_validate_events(streamed), frame)
    assert message.startswith("archived events of topic 'events' break the schema (1 problem(s))")
    for fragment in expected:
        assert fragment in message


def test_every_problem_is_reported_at_once(streamed: StreamRun, events: pd.DataFrame) -> None:
    frame = events.head(50).copy()
    for breaks in (_null_org, _negative_bytes, _repeated_offset):
        breaks(frame)
    message = _rejected(_validate_events(streamed), frame)
    assert "(3 problem(s))" in message
    assert (
        "'org'" in message and "'bytes_tx'" in message and "(topic, partition, offset)" in message
    )


def test_a_schema_violation_is_a_quality_error(streamed: StreamRun, events: pd.DataFrame) -> None:
    frame = events.head(5).copy()
    _negative_bytes(frame)
    with pytest.raises(QualityError):
        validate_archive_events(
            pa.Table.from_pandas(frame, preserve_index=False), _declared(streamed)
        )


# --- bad dead letters ---------------------------------------------------------------------------


def test_dead_letters_reject_an_unknown_reason_and_a_repeated_position(
    dead_letters: pd.DataFrame,
) -> None:
    frame = dead_letters.copy()
    frame.loc[0, "reason"] = "gremlins"
    message = _rejected(validate_dead_letters, frame)
    assert "column 'reason' fails 'in {empty, oversize, too_deep, malformed_json" in message
    assert "'gremlins'" in message
    frame = pd.concat([dead_letters, dead_letters.head(1)], ignore_index=True)
    message = _rejected(validate_dead_letters, frame)
    assert "columns (topic, partition, offset) fail 'unique'" in message
    first = dead_letters.iloc[0]
    assert f"({first['topic']!r}, {first['partition']}, {first['offset']})" in message


def test_dead_letters_may_lack_the_value_but_not_the_detail(dead_letters: pd.DataFrame) -> None:
    frame = dead_letters.copy()
    frame.loc[0, "value"] = None
    validate_dead_letters(frame)
    frame.loc[1, "detail"] = None
    assert "column 'detail' fails not-null" in _rejected(validate_dead_letters, frame)


# --- bad segments and query results -------------------------------------------------------------


@pytest.fixture(scope="module")
def served(streamed: StreamRun, hours: list[int]) -> pd.DataFrame:
    view = _view(streamed, "traffic_by_org")
    return query_realtime(streamed.store, view, hours[0], hours[-1] + HOUR_MS).to_pandas()


def _query_rejects(streamed: StreamRun, frame: pd.DataFrame) -> str:
    view = _view(streamed, "traffic_by_org")
    return _rejected(lambda f: validate_segment(view, f), frame)


def test_query_results_reject_a_repeated_window_and_group(
    streamed: StreamRun, served: pd.DataFrame
) -> None:
    frame = pd.concat([served, served.iloc[[4]]], ignore_index=True)
    message = _query_rejects(streamed, frame)
    assert "query rows of view traffic_by_org break the schema (1 problem(s))" in message
    assert "columns (window_start, org) fail 'unique': 2 row(s) share a key" in message
    assert served.iloc[4]["org"] in message


def test_query_results_reject_a_wrong_window_width(
    streamed: StreamRun, served: pd.DataFrame
) -> None:
    frame = served.copy()
    frame.loc[2, "window_end"] = frame.loc[2, "window_start"] + pd.Timedelta(minutes=15)
    message = _query_rejects(streamed, frame)
    assert "columns (window_start, window_end) fail 'window_end - window_start == 10m'" in message
    assert frame.loc[2, "window_end"].isoformat() in message


def test_query_results_reject_a_negative_count_a_null_group_and_a_bad_source(
    streamed: StreamRun, served: pd.DataFrame
) -> None:
    frame = served.copy()
    frame.loc[1, "events"] = -3
    frame.loc[2, "org"] = None
    frame.loc[3, "source"] = "batch v0"
    message = _query_rejects(streamed, frame)
    assert "column 'events' fails '>= 0' in 1 row(s), e.g. -3" in message
    assert "column 'org' fails not-null in 1 row(s)" in message
    assert "column 'source' fails 'matches ^(realtime|batch v[1-9][0-9]*)$'" in message
    assert "'batch v0'" in message


def test_query_results_reject_a_metric_of_the_wrong_type_and_a_range_break(
    streamed: StreamRun, served: pd.DataFrame
) -> None:
    frame = served.copy()
    frame["events"] = frame["events"].astype("float64")
    frame.loc[0, "bytes_min"] = -1  # bytes_tx >= 0, so its min is too (an exact long)
    message = _query_rejects(streamed, frame)
    assert "column 'events' fails dtype('int64'): got 'float64'" in message
    assert "column 'bytes_min' fails '>= 0' in 1 row(s), e.g. -1" in message


def _batch_rows(served: pd.DataFrame, view: View) -> pd.DataFrame:
    """Corrected segment rows of the same windows: epoch-ms window starts, no end or source,
    and a state column per aggregation (null: a state Spark cannot build)."""
    rows = served.drop(columns=["window_end", "source"])
    rows["window_start"] = rows["window_start"].dt.as_unit("ms").astype("int64")
    for agg in view.aggregators:
        rows[state_column(agg.out)] = None
    return rows


def test_corrected_rows_reject_a_window_off_the_grid(
    streamed: StreamRun, served: pd.DataFrame
) -> None:
    view = _view(streamed, "traffic_by_org")
    rows = _batch_rows(served, view)
    corrected_schema(view).validate(rows)
    assert len(validate_segment(view, rows, SegmentKind.BATCH)) == len(rows)
    rows.loc[0, "window_start"] += 60_000
    message = _rejected(lambda f: validate_segment(view, f), rows)
    assert "batch rows of view traffic_by_org" in message
    assert "column 'window_start' fails 'multiple of 10m'" in message
    assert str(rows.loc[0, "window_start"]) in message


def test_realtime_rows_reject_a_missing_state(streamed: StreamRun, hours: list[int]) -> None:
    view = _view(streamed, "sessions_by_org")
    key = streamed.store.list(realtime_prefix(view.name, view.segment_start(hours[1])))[0]
    frame = pq.read_table(io.BytesIO(streamed.store.get(key))).to_pandas()
    frame.loc[0, "sessions__state"] = None
    message = _rejected(lambda f: validate_segment(view, f), frame)
    assert "realtime rows of view sessions_by_org" in message
    assert "column 'sessions__state' fails not-null" in message


def test_specs_follow_the_view(streamed: StreamRun) -> None:
    view = _view(streamed, "all_2h")
    spec = segment_spec(view, SegmentKind.QUERY)
    assert spec.unique == ("window_start",)
    rules = {c.name: [r.label for r in c.rules] for c in spec.columns}
    assert rules["events"] == [">= 0"]
    assert rules["first_bytes"] == rules["last_bytes"] == [">= 0"]  # bytes_tx's range
    assert rules["bytes_total"] == [">= 0"]
    assert rules["window_start"] == ["multiple of 2h"]
    assert spec.width is not None and spec.width.interval_ms == 2 * HOUR_MS
    top = segment_spec(_view(streamed, "top_clients_hourly"), SegmentKind.BATCH)
    assert {c.name: [r.label for r in c.rules] for c in top.columns}["first_type"] == ["non-empty"]


# --- the archive asset check --------------------------------------------------------------------


def test_archive_check_passes_on_the_real_archive_in_a_dagster_run(
    streamed: StreamRun, hours: list[int], events: pd.DataFrame
) -> None:
    result = dg.materialize(
        [raw_archive, build_archive_schema_check(streamed.views)],
        resources={"storage": LocalStorageResource(root=str(streamed.store.root))},
        tags={
            "dagster/asset_partition_range_start": partition_key_for(hours[0]),
            "dagster/asset_partition_range_end": partition_key_for(hours[-1]),
        },
    )
    assert result.success
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == ARCHIVE_SCHEMA_CHECK
    assert evaluation.passed
    metadata = {k: v.value for k, v in evaluation.metadata.items()}
    assert metadata["events"] == len(events)
    assert metadata["dead_letters"] > 0
    assert metadata["hours_failed"] == 0
    assert set(metadata["per_hour"]) == {hour_label(h) for h in hours}


def test_archive_check_fails_on_a_range_archived_twice_and_a_negative_size(
    streamed: StreamRun, hours: list[int], tmp_path: Path
) -> None:
    store = LocalObjectStore(tmp_path / "storage")
    hour = hours[1]
    table, keys = read_archive_hour(streamed.store, hour)
    assert table is not None
    store.put(keys[0], streamed.store.get(keys[0]))
    # the first file's rows again under another range's name: positions archived twice
    again = pq.read_table(io.BytesIO(streamed.store.get(keys[0])))
    part = int(again.column("partition")[0].as_py())
    sizes = again.column("bytes_tx").to_pylist()
    sizes[0] = -7
    broken = again.set_column(again.schema.get_field_index("bytes_tx"), "bytes_tx", pa.array(sizes))
    sink = io.BytesIO()
    pq.write_table(broken, sink)
    store.put(archive_events_key(hour, "events", part, 10**9, 10**9 + 1), sink.getvalue())
    result = evaluate_archive_schema(store, [hour], {"events": _declared(streamed)})
    assert not result.passed
    violations = result.metadata["violations"].value
    (problem,) = violations[next(iter(violations))]
    assert "column 'bytes_tx' fails '>= 0' in 1 row(s), e.g. -7" in problem
    assert "columns (topic, partition, offset) fail 'unique'" in problem
    assert f"{2 * again.num_rows} row(s) share a key" in problem
    assert result.metadata["event_files"].value == 2
    assert "break the archive schemas" in result.description
