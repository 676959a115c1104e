"""Commits to the views' Iceberg tables, on SQLite and on the real PostgreSQL server: a
correction replaces its hours in one snapshot, concurrent corrections of one hour end with one
of them whole, and realtime rows never replace an hour the batch corrected."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.batch.publish import (
    SegmentRows,
    TableTarget,
    publish_version,
    publish_versions,
)
from pipelines.config import PROJECT_ROOT
from pipelines.segments import HOUR_MS
from pipelines.storage import LocalObjectStore
from pipelines.tables import (
    BATCH,
    REALTIME,
    TableBusyError,
    TablesConfig,
    ViewTables,
    batch_hours,
    replace_hours,
    table_rows,
)
from pipelines.views import View, load_views

H = 1_404_201_600_000  # 2014-07-01T08


@pytest.fixture(scope="module")
def views() -> dict[str, View]:
    return {v.name: v for v in load_views(PROJECT_ROOT / "data" / "views.yaml")}


def _tables(control_url: str, root: Path) -> ViewTables:
    return ViewTables(TablesConfig(warehouse=str(root), catalog_url=control_url))


def _window_rows(view: View, hour: int, events: int, orgs=("a", "b", "c")) -> pa.Table:
    """A batch file's rows (window_start in epoch ms) for every 10-minute window of ``hour``."""
    starts = [hour + i * view.interval_ms for i in range(HOUR_MS // view.interval_ms)]
    rows = [
        {"window_start": s, "org": org, "events": events, "bytes_total": float(events)}
        for s in starts
        for org in orgs
    ]
    return pa.Table.from_pylist(rows)


def _hour_rows(table, view: View, hour: int, snapshot_id: int | None = None) -> list[dict]:
    scan = table.scan(snapshot_id=snapshot_id) if snapshot_id else table.scan()
    rows = scan.to_arrow().to_pylist()
    return [r for r in rows if hour <= int(r["window_start"].timestamp() * 1000) < hour + HOUR_MS]


def test_a_correction_replaces_its_hours_in_one_snapshot(control_url, tmp_path, views) -> None:
    view = views["traffic_by_org"]
    tables = _tables(control_url, tmp_path / "root")
    store = LocalObjectStore(str(tmp_path / "root"))
    realtime = table_rows(view, _window_rows(view, H, 1), REALTIME, 0)
    replace_hours(tables, view, [H], realtime, source=REALTIME)
    target = TableTarget(tables, run_id="run-1")
    version, files = publish_version(target, view, H, _window_rows(view, H, 7), 42, 3, ["x"])
    again, _ = publish_version(target, view, H, _window_rows(view, H, 8), 42, 3, ["x"])
    assert (version, again) == (1, 2) and len(files) == 1
    table = tables.load(view)
    rows = _hour_rows(table, view, H)
    assert len(rows) == 18 and {(r["source"], r["batch_version"], r["events"]) for r in rows} == {
        (BATCH, 2, 8)
    }
    assert not (store.root and (tmp_path / "root" / "segments").exists())  # no _published.json
    summaries = [s.summary for s in table.snapshots()]
    batch = [s for s in summaries if s["sluice.source"] == BATCH]
    assert {s["sluice.run-id"] for s in batch} == {"run-1"}
    assert {s["sluice.batch-version"] for s in batch} == {"1", "2"}
    assert batch[-1]["sluice.events"] == "42" and batch[-1]["sluice.archive-hours"] == "x"
    # time travel: the hour before the first correction still says what the stream said
    first_batch = next(s for s in table.snapshots() if s.summary["sluice.source"] == BATCH)
    before = _hour_rows(table, view, H, first_batch.parent_snapshot_id)
    assert {(r["source"], r["events"]) for r in before} == {(REALTIME, 1)}
    assert batch_hours(table, view) == {H: 2}
    tables.close()


def test_a_run_publishes_its_segments_in_one_snapshot_each_with_its_version(
    control_url, tmp_path, views
) -> None:
    """Two hours, one corrected before: one commit replaces both, each hour with its own next
    version; the summary sums the segments."""
    view = views["traffic_by_org"]
    tables = _tables(control_url, tmp_path / "root")
    second = H + HOUR_MS
    target = TableTarget(tables, run_id="run-1")
    publish_version(target, view, H, _window_rows(view, H, 1), 10, 0, ["a"])
    before = len(tables.load(view).snapshots())
    parts = [
        SegmentRows(H, _window_rows(view, H, 2), 20, 1, ["a"]),
        SegmentRows(second, _window_rows(view, second, 3), 30, 2, ["b"]),
    ]
    published = publish_versions(target, view, parts)
    assert [version for version, _ in published] == [2, 1]
    assert all(len(files) == 1 for _, files in published)
    table = tables.load(view)
    assert len(table.snapshots()) == before + 1
    summary = table.current_snapshot().summary
    assert (summary["sluice.events"], summary["sluice.archive-hours"]) == ("50", "a,b")
    assert batch_hours(table, view) == {H: 2, second: 1}
    assert {(r["batch_version"], r["events"]) for r in _hour_rows(table, view, second)} == {(1, 3)}
    tables.close()


def test_two_corrections_of_one_hour_at_once_end_with_one_whole(
    control_url, tmp_path, views
) -> None:
    """Each thread has its own catalog connection, as two processes would; they start their
    commits together, several rounds. Every snapshot ever committed shows the hour from one
    correction only (no mix, no duplicate rows); both corrections land, one after the other."""
    view = views["traffic_by_org"]
    root = tmp_path / "root"
    rounds = 4
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    results: dict[int, list[int]] = {100: [], 200: []}

    def correct(events: int) -> None:
        tables = _tables(control_url, root)
        try:
            target = TableTarget(tables, run_id=f"run-{events}")
            for _ in range(rounds):
                barrier.wait(timeout=30)
                version, _ = publish_version(
                    target, view, H, _window_rows(view, H, events), events, 0, []
                )
                results[events].append(version)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            tables.close()

    threads = [threading.Thread(target=correct, args=(n,)) for n in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    versions = sorted(results[100] + results[200])
    assert versions == list(range(1, 2 * rounds + 1)), "every commit got its own version"
    tables = _tables(control_url, root)
    table = tables.load(view)
    for snapshot in table.snapshots():
        rows = _hour_rows(table, view, H, snapshot.snapshot_id)
        assert len({(r["source"], r["batch_version"], r["events"]) for r in rows}) == 1
        keys = [(r["window_start"], r["org"]) for r in rows]
        assert len(keys) == len(set(keys)) == 18
    final = _hour_rows(table, view, H)
    assert {r["batch_version"] for r in final} == {2 * rounds}
    assert len(table.snapshots()) == 2 * rounds, "one snapshot per correction"
    tables.close()


def test_realtime_commits_never_replace_a_corrected_hour(control_url, tmp_path, views) -> None:
    """A publisher commits realtime rows for two hours in a loop while a correction of the
    first hour commits: the corrected hour keeps its batch rows in every later snapshot."""
    view = views["traffic_by_org"]
    root = tmp_path / "root"
    stop = threading.Event()
    corrected = threading.Event()
    after: list[tuple] = []
    errors: list[BaseException] = []
    realtime = table_rows(
        view,
        pa.concat_tables([_window_rows(view, H, 5), _window_rows(view, H + HOUR_MS, 5)]),
        REALTIME,
        0,
    )

    def publish() -> None:
        tables = _tables(control_url, root)
        try:
            while not stop.is_set():
                seen = corrected.is_set()
                try:
                    outcome = replace_hours(
                        tables, view, [H, H + HOUR_MS], realtime, source=REALTIME
                    )
                except TableBusyError:  # the correction's turn: the publisher tries again
                    continue
                if seen:
                    after.append((outcome.hours, outcome.skipped))
                # a commit every 0.1 s (the fleet's publisher: one every 30 s): back to back,
                # the publisher's short commits starve the correction's longer one
                stop.wait(0.1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            tables.close()

    publisher = threading.Thread(target=publish)
    publisher.start()
    tables = _tables(control_url, root)
    try:
        table = tables.load(view)
        deadline = 60
        start = time.monotonic()
        while table.current_snapshot() is None and time.monotonic() - start < deadline:
            time.sleep(0.05)
            table = tables.load(view)
        target = TableTarget(tables, run_id="fix")
        version, _ = publish_version(target, view, H, _window_rows(view, H, 9), 9, 0, [])
        corrected.set()
        start = time.monotonic()
        while len(after) < 3 and time.monotonic() - start < deadline and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        publisher.join(timeout=60)
    assert not errors, errors
    assert len(after) >= 3, "the publisher kept publishing after the correction"
    assert all(H not in hours and H in skipped for hours, skipped in after)
    table = tables.load(view)
    rows = _hour_rows(table, view, H)
    assert {(r["source"], r["batch_version"], r["events"]) for r in rows} == {(BATCH, version, 9)}
    assert len(rows) == 18
    later = _hour_rows(table, view, H + HOUR_MS)
    assert {(r["source"], r["events"]) for r in later} == {(REALTIME, 5)} and len(later) == 18
    first_batch = min(
        (s for s in table.snapshots() if s.summary.get("sluice.source") == BATCH),
        key=lambda s: s.sequence_number,
    )
    for snapshot in table.snapshots():
        if snapshot.sequence_number > first_batch.sequence_number:
            rows = _hour_rows(table, view, H, snapshot.snapshot_id)
            assert {r["source"] for r in rows} <= {BATCH}
    tables.close()


CORRECTIONS = 5


def test_a_correction_lands_at_its_second_attempt_at_worst_under_continuous_publishing(
    control_url, tmp_path, views
) -> None:
    """A publisher commits back to back (no pause) while corrections of another hour commit:
    each correction lands within two attempts (a realtime commit under way can win once; then
    the publisher gives way), and the publisher keeps publishing between them."""
    view = views["traffic_by_org"]
    root = tmp_path / "root"
    stop = threading.Event()
    errors: list[BaseException] = []
    published: list[int] = []
    gave_way: list[int] = []
    realtime = table_rows(view, _window_rows(view, H + HOUR_MS, 5), REALTIME, 0)

    def publish() -> None:
        tables = _tables(control_url, root)
        try:
            while not stop.is_set():
                try:
                    replace_hours(tables, view, [H + HOUR_MS], realtime, source=REALTIME)
                    published.append(1)
                except TableBusyError:
                    gave_way.append(1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            tables.close()

    tables = _tables(control_url, root)
    tables.load(view)  # created before both writers start
    publisher = threading.Thread(target=publish)
    publisher.start()
    attempts = []
    try:
        deadline = time.monotonic() + 60
        while not published and time.monotonic() < deadline and not errors:
            time.sleep(0.01)
        for n in range(CORRECTIONS):
            before = len(published)
            outcome = replace_hours(
                tables,
                view,
                [H],
                table_rows(view, _window_rows(view, H, 10 + n), BATCH, n + 1),
                source=BATCH,
            )
            attempts.append(outcome.attempts)
            deadline = time.monotonic() + 60  # the publisher publishes again between them
            while len(published) <= before and time.monotonic() < deadline and not errors:
                time.sleep(0.01)
    finally:
        stop.set()
        publisher.join(timeout=60)
    assert not errors, errors
    assert max(attempts) <= 2, attempts
    assert len(published) > CORRECTIONS, "the publisher kept committing in between"
    rows = _hour_rows(tables.load(view), view, H)
    assert {(r["source"], r["events"]) for r in rows} == {(BATCH, 10 + CORRECTIONS - 1)}
    tables.close()


def test_a_snapshot_keeps_no_manifest_without_live_files(control_url, tmp_path, views) -> None:
    """One hour replaced commit after commit (the publisher every 30 s): the current
    snapshot's manifests stay the hour's file and the last commit's deletions, not one more
    manifest per commit that each later commit reads again."""
    view = views["traffic_by_org"]
    tables = _tables(control_url, tmp_path / "root")
    commits = 8
    for events in range(1, commits + 1):
        rows = table_rows(view, _window_rows(view, H, events), REALTIME, 0)
        replace_hours(tables, view, [H], rows, source=REALTIME)
    table = tables.load(view)
    manifests = table.inspect.manifests().to_pylist()
    dead = [
        m
        for m in manifests
        if m["added_data_files_count"] == 0 and m["existing_data_files_count"] == 0
    ]
    assert len(table.snapshots()) == commits
    assert len(manifests) <= 2 and len(dead) <= 1, manifests
    assert {(r["source"], r["events"]) for r in _hour_rows(table, view, H)} == {(REALTIME, commits)}
    tables.close()


def test_table_errors_are_sluice_errors() -> None:
    """Callers catch Sluice's root; the older bases stay for those that catch them."""
    from pipelines.exceptions import SluiceError
    from pipelines.tables import TableConflictError, TableLocationError

    assert issubclass(TableConflictError, SluiceError) and issubclass(
        TableConflictError, RuntimeError
    )
    assert issubclass(TableLocationError, SluiceError) and issubclass(
        TableLocationError, ValueError
    )


def test_a_correction_renews_its_claim_on_the_next_commit_at_a_later_attempt(
    control_url, tmp_path, views, monkeypatch
) -> None:
    """The claim is short (a dead correction holds the publisher back briefly): an attempt that
    starts past half of it renews it, so a correction that lost its first attempt still has
    the next turn."""
    from pipelines.tables import commit

    monkeypatch.setattr(commit, "BATCH_TURN_S", 1.0)
    view = views["traffic_by_org"]
    tables = _tables(control_url, tmp_path / "root")
    tables.load(view)
    write = commit._write_hour_files
    realtime = table_rows(view, _window_rows(view, H + HOUR_MS, 5), REALTIME, 0)
    claim_stands: list[bool] = []

    def slow_attempt(table, view, data, hours, *args, **kwargs):
        if hours == [H]:  # the correction's attempts (not the publisher's below)
            claim_stands.append(commit._batch_waiting(table))
            if len(claim_stands) == 1:  # the first attempt outlasts the claim: the publisher
                time.sleep(1.2)  # commits meanwhile (no claim stands): this attempt conflicts
                replace_hours(tables, view, [H + HOUR_MS], realtime, source=REALTIME)
        return write(table, view, data, hours, *args, **kwargs)

    monkeypatch.setattr(commit, "_write_hour_files", slow_attempt)
    rows = table_rows(view, _window_rows(view, H, 3), BATCH, 1)
    outcome = replace_hours(tables, view, [H], rows, source=BATCH)
    assert outcome.attempts == 2
    assert claim_stands == [True, True], "the second attempt ran without the claim"
    assert not commit._batch_waiting(tables.load(view)), "released once committed"
    tables.close()


def test_each_data_file_entry_equals_what_pyiceberg_reads_from_the_file(
    control_url, tmp_path, views
) -> None:
    """A commit builds its files' entries (partition, counts, bounds, size) from the footers it
    wrote rather than reading every file back: each equals pyiceberg's own entry of the file,
    nulls and several hours included."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    view = views["traffic_by_org"]
    tables = _tables(control_url, tmp_path / "root")
    hours = [H, H + HOUR_MS, H + 3 * HOUR_MS]
    parts = [_window_rows(view, h, 3 + i, orgs=("a", "b", None)) for i, h in enumerate(hours)]
    rows = table_rows(view, pa.concat_tables(parts[::-1]), REALTIME, 0)  # hours out of order
    outcome = replace_hours(tables, view, hours, rows, source=REALTIME)
    table = tables.load(view)
    entries = {t.file.file_path: t.file for t in table.scan().plan_files()}
    assert sorted(entries) == sorted(outcome.file_of_hour.values()) and len(entries) == 3
    fields = (
        "partition",
        "record_count",
        "file_size_in_bytes",
        "column_sizes",
        "value_counts",
        "null_value_counts",
        "nan_value_counts",
        "lower_bounds",
        "upper_bounds",
        "split_offsets",
    )
    for path, entry in entries.items():
        expected = parquet_file_to_data_file(table.io, table.metadata, path)
        for name in fields:
            assert getattr(entry, name) == getattr(expected, name), (path, name)
    assert sum(e.record_count for e in entries.values()) == rows.num_rows
