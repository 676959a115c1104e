"""Reconciliation on generated data: causes counted from the archive, differences explained."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.batch import correct_hours
from pipelines.generator import GeneratorOptions
from pipelines.segments import (
    HOUR_MS,
    archive_events_key,
    hour_label,
    read_parquet,
    realtime_prefix,
)
from pipelines.serving import query_view
from pipelines.tables import ViewTables
from pipelines.testing import StreamRun, run_stream
from pipelines.views import load_views
from quality.causes import ArchiveReader, read_hour_archive
from quality.compare import Tolerance
from quality.reconcile import reconcile
from quality.reconcile.reads import corrected_by_hour
from tests.fixtures.spark import spark  # noqa: F401
from tests.fixtures.tables import local_tables

pytestmark = pytest.mark.spark

VIEWS = load_views(Path(__file__).resolve().parents[2] / "data" / "views.yaml")
COUNTED = [
    v
    for v in VIEWS
    if v.name
    in ("traffic_by_org", "sessions_by_org", "bytes_quantiles_by_type", "transfers_last_hour")
]


def _run(root: Path, spark, options: GeneratorOptions) -> tuple[StreamRun, ViewTables]:  # noqa: F811
    run = run_stream(root / "storage", COUNTED, partitions=3, options=options)
    tables = local_tables(run.store.root, root / "catalog.db")
    correct_hours(spark, run.store, COUNTED, run.event_hours(), tables=tables)
    return run, tables


@pytest.fixture(scope="module")
def clean(tmp_path_factory, spark) -> Iterator[tuple[StreamRun, ViewTables]]:  # noqa: F811
    options = GeneratorOptions(
        max_events=6000, speedup=36.0, late_share=0.0, duplicate_share=0.0, malformed_share=0.0
    )
    run, tables = _run(tmp_path_factory.mktemp("clean"), spark, options)
    yield run, tables
    tables.close()


@pytest.fixture(scope="module")
def clean_run(clean) -> StreamRun:
    return clean[0]


@pytest.fixture(scope="module")
def clean_tables(clean) -> ViewTables:
    return clean[1]


@pytest.fixture(scope="module")
def messy_run(messy) -> StreamRun:
    return messy[0]


@pytest.fixture(scope="module")
def messy_tables(messy) -> ViewTables:
    return messy[1]


@pytest.fixture(scope="module")
def messy(tmp_path_factory, spark) -> Iterator[tuple[StreamRun, ViewTables]]:  # noqa: F811
    options = GeneratorOptions(
        max_events=6000,
        speedup=36.0,
        late_share=0.06,
        late_delay_mean_s=900.0,
        duplicate_share=0.04,
        malformed_share=0.01,
    )
    run, tables = _run(tmp_path_factory.mktemp("messy"), spark, options)
    yield run, tables
    tables.close()


def test_clean_data_reconciles_with_zero_difference(clean_run: StreamRun, clean_tables) -> None:
    results = reconcile(
        clean_run.store, COUNTED, clean_run.event_hours(), Tolerance(), tables=clean_tables
    )
    assert results and all(r.corrected for r in results)
    for result in results:
        assert result.passed, result.failures
        assert result.causes.duplicates == result.causes.late_dropped == 0
        assert result.comparison is not None and not result.comparison.missing
        assert not result.comparison.extra
        exact = [m for m in result.metrics if m.kind == "exact"]
        assert exact and all(m.differing == 0 for m in exact)
    assert sum(r.causes.events for r in results if r.view == "traffic_by_org") == len(
        clean_run.valid_messages()
    )


def test_late_and_duplicate_events_are_counted_and_explain_the_difference(
    messy_run: StreamRun,
    messy_tables,
) -> None:
    results = reconcile(
        messy_run.store, COUNTED, messy_run.event_hours(), Tolerance(), tables=messy_tables
    )
    traffic = [r for r in results if r.view == "traffic_by_org"]
    duplicates_sent = sum(1 for m in messy_run.messages if m.kind == "duplicate")
    assert duplicates_sent > 50
    assert sum(r.causes.duplicates for r in traffic) == duplicates_sent
    # the stream's own late counter, per view, against the archive replay of its watermark
    for view in COUNTED:
        dropped = sum(t.states[view.name].late for t in messy_run.tasks)
        counted = sum(r.causes.late_dropped for r in results if r.view == view.name)
        assert dropped > 20 and counted == dropped, view.name
    assert sum(r.causes.dead_letters for r in traffic) == len(messy_run.dead_letters.letters)
    events = [m for r in traffic for m in r.metrics if m.column == "events"]
    assert sum(m.differing for m in events) > 0  # the stream was off ...
    for result in results:
        assert result.passed, result.failures  # ... and every difference has a cause


def test_lost_realtime_data_is_unexplained_and_fails(
    messy_run: StreamRun, tmp_path: Path, messy_tables
) -> None:
    view = next(v for v in COUNTED if v.name == "traffic_by_org")
    hours = messy_run.event_hours()
    busiest = max(hours, key=lambda h: len(messy_run.store.list(realtime_prefix(view.name, h))))
    victim = sorted(messy_run.store.list(realtime_prefix(view.name, busiest)))[0]
    saved = messy_run.store.get(victim)
    messy_run.store.delete(victim)
    try:
        (result,) = reconcile(messy_run.store, [view], [busiest], Tolerance(), tables=messy_tables)
    finally:
        messy_run.store.put(victim, saved)
    assert not result.passed
    # the task's partition held whole organisations: their groups vanish from realtime
    (failure,) = result.failures
    assert "missing from realtime" in failure and "traffic_by_org" in failure
    assert result.groups_unexplained > 0


def test_corrected_rows_read_per_run_of_hours_match_each_hour_read_alone(
    messy_run: StreamRun,
    messy_tables,
) -> None:
    view = next(v for v in COUNTED if v.name == "transfers_last_hour")
    hours = messy_run.event_hours()
    assert len(hours) >= 3
    wanted = [hours[0], *hours[2:]]  # two runs of consecutive hours
    by_hour = corrected_by_hour(messy_run.store, messy_tables, view, wanted)
    assert sorted(by_hour) == wanted
    for hour in wanted:
        alone = query_view(
            messy_run.store, view, hour, hour + HOUR_MS, prefer="batch", tables=messy_tables
        )
        assert alone.num_rows > 0
        assert by_hour[hour].equals(alone), hour


def test_an_hour_read_by_an_earlier_pass_is_reused_until_its_files_change(
    messy_run: StreamRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, view = messy_run.store, COUNTED[0]
    hour = messy_run.event_hours()[1]
    columns = ["client"]  # no other pass of this store reads these: nothing read before
    reads: list[str] = []
    get = store.get
    monkeypatch.setattr(store, "get", lambda key: reads.append(key) or get(key))

    def files_read() -> list[str]:  # range records are read on every pass: they are listings
        return [k for k in reads if k.startswith(("archive/events/", "archive/dead_letters/"))]

    first = read_hour_archive(ArchiveReader(store), view.topic, hour, columns)
    archive_reads = files_read()
    assert archive_reads and first.rows.num_rows > 0
    reads.clear()
    again = read_hour_archive(ArchiveReader(store), view.topic, hour, columns)
    assert again is first and not files_read()

    # a file the hour did not have (a late flush): the next pass reads the hour again
    key = next(k for k in archive_reads if k.startswith("archive/events/"))
    assert hour_label(hour) in key
    partition = int(key.rpartition("/")[2].removesuffix(".parquet").rsplit("-", 3)[1])
    extra = archive_events_key(hour, view.topic, partition, 10**9, 10**9 + 1)
    store.put(extra, get(key))
    try:
        reads.clear()
        grown = read_hour_archive(ArchiveReader(store), view.topic, hour, columns)
        assert extra in reads
        added = read_parquet(get(extra)).num_rows
        # its rows, and (its offsets reaching far) every later hour's that came before them
        assert grown.rows.num_rows >= first.rows.num_rows + added
    finally:
        store.delete(extra)


def test_an_hour_short_of_a_file_that_vanished_is_read_again_by_the_next_pass(
    messy_run: StreamRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, view = messy_run.store, COUNTED[0]
    hour = messy_run.event_hours()[2]
    columns = ["session_id"]  # read by no other pass of this store
    whole = read_hour_archive(ArchiveReader(store), view.topic, hour, ["client"])
    get = store.get
    vanished: list[str] = []

    def get_but_one(key: str) -> bytes:
        if key.startswith("archive/events/") and not vanished:
            vanished.append(key)
            raise FileNotFoundError(key)  # a task discarded it while the pass read
        return get(key)

    monkeypatch.setattr(store, "get", get_but_one)
    short = read_hour_archive(ArchiveReader(store), view.topic, hour, columns)
    assert vanished and short.rows.num_rows < whole.rows.num_rows
    monkeypatch.setattr(store, "get", get)
    again = read_hour_archive(ArchiveReader(store), view.topic, hour, columns)
    assert again.rows.num_rows == whole.rows.num_rows
