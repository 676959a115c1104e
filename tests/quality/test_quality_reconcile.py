"""Reconciliation on generated data: causes counted from the archive, differences explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.batch import correct_hours
from pipelines.generator import GeneratorOptions
from pipelines.segments import realtime_prefix
from pipelines.testing import StreamRun, run_stream
from pipelines.views import load_views
from quality.compare import Tolerance
from quality.reconcile import reconcile
from tests.fixtures.spark import spark  # noqa: F401

pytestmark = pytest.mark.spark

VIEWS = load_views(Path(__file__).resolve().parents[2] / "data" / "views.yaml")
COUNTED = [
    v
    for v in VIEWS
    if v.name
    in ("traffic_by_org", "sessions_by_org", "bytes_quantiles_by_type", "transfers_last_hour")
]


def _run(root: Path, spark, options: GeneratorOptions) -> StreamRun:  # noqa: F811
    run = run_stream(root, COUNTED, partitions=3, options=options)
    correct_hours(spark, run.store, COUNTED, run.event_hours())
    return run


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, spark) -> StreamRun:  # noqa: F811
    options = GeneratorOptions(
        max_events=6000, speedup=36.0, late_share=0.0, duplicate_share=0.0, malformed_share=0.0
    )
    return _run(tmp_path_factory.mktemp("clean"), spark, options)


@pytest.fixture(scope="module")
def messy_run(tmp_path_factory, spark) -> StreamRun:  # noqa: F811
    options = GeneratorOptions(
        max_events=6000,
        speedup=36.0,
        late_share=0.06,
        late_delay_mean_s=900.0,
        duplicate_share=0.04,
        malformed_share=0.01,
    )
    return _run(tmp_path_factory.mktemp("messy"), spark, options)


def test_clean_data_reconciles_with_zero_difference(clean_run: StreamRun) -> None:
    results = reconcile(clean_run.store, COUNTED, clean_run.event_hours(), Tolerance())
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
) -> None:
    results = reconcile(messy_run.store, COUNTED, messy_run.event_hours(), Tolerance())
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


def test_lost_realtime_data_is_unexplained_and_fails(messy_run: StreamRun, tmp_path: Path) -> None:
    view = next(v for v in COUNTED if v.name == "traffic_by_org")
    hours = messy_run.event_hours()
    busiest = max(hours, key=lambda h: len(messy_run.store.list(realtime_prefix(view.name, h))))
    victim = sorted(messy_run.store.list(realtime_prefix(view.name, busiest)))[0]
    saved = messy_run.store.get(victim)
    messy_run.store.delete(victim)
    try:
        (result,) = reconcile(messy_run.store, [view], [busiest], Tolerance())
    finally:
        messy_run.store.put(victim, saved)
    assert not result.passed
    # the task's partition held whole organisations: their groups vanish from realtime
    (failure,) = result.failures
    assert "missing from realtime" in failure and "traffic_by_org" in failure
    assert result.groups_unexplained > 0
