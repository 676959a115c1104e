"""Corrections that run themselves: archive hours close by the fleet's event-time watermark,
the corrected views follow each closed hour and the report follows a corrected day."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from assets.constants import RAW_ARCHIVE_KEY, RECONCILIATION_REPORT_KEY, corrected_key
from assets.partitions import partition_key_for
from assets.raw import raw_archive
from assets.views.checks import build_correction_checks, hour_evaluation
from orchestration.control_plane.spark.correction_job import SEGMENT_RULES_CHECK
from orchestration.definitions import corrected_assets, reconciliation_report
from orchestration.resources import (
    LocalControlStoreResource,
    LocalSparkResource,
    LocalStorageResource,
)
from orchestration.sensors import make_archive_hours_sensor
from orchestration.sensors.archive_hours import MAX_STRETCH_HOURS, catching_up
from pipelines.control import ControlStore, TaskStatus
from pipelines.segments import HOUR_MS
from tests.fixtures.dagster_fixture import build_archive, example_views

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

VIEWS = example_views()
H21 = int(datetime(2015, 2, 26, 21, tzinfo=UTC).timestamp() * 1000)
H22, H23 = H21 + HOUR_MS, H21 + 2 * HOUR_MS
CLOSING_MS = max(v.allowed_lateness_ms for v in VIEWS) + 15 * 60_000  # + the default grace


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("automation") / "storage"
    build_archive(root)  # hours 21:00, 22:00 and 23:00 of 2015-02-26
    return root


def _report(
    url: str, watermark: int, backlog: int = 0, checkpointed: int | None = None, end: int = 1000
) -> None:
    store = ControlStore(url)
    store.report_tasks(
        [
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id="a0",
                pid=1,
                next_offset=end,
                end_offset=end + backlog,
                watermark=float(watermark + p),  # the fleet's watermark is the smallest
                checkpointed_offset=checkpointed,
            )
            for p in range(4)
        ]
    )
    store.close()


class _Sensor:
    """The archive sensor ticking against a control store and the module's archive, on a
    clock the test moves; each tick returns what it recorded."""

    def __init__(self, url: str, storage_root: Path, now: float) -> None:
        self.now = now
        self.sensor = make_archive_hours_sensor(VIEWS, 15, idle_close_s=300, clock=lambda: self.now)
        self.resources = {
            "control_store": LocalControlStoreResource(sqlite_url=url),
            "storage": LocalStorageResource(root=str(storage_root)),
        }
        self.cursor: str | None = None

    def tick(self) -> list[dg.AssetMaterialization]:
        with dg.build_sensor_context(resources=self.resources, cursor=self.cursor) as context:
            result = self.sensor.evaluate_tick(context)
        self.cursor = result.cursor
        assert all(e.asset_key == RAW_ARCHIVE_KEY for e in result.asset_events)
        return list(result.asset_events)


def test_hours_close_as_the_watermark_passes_them_and_the_last_when_the_stream_stops(
    storage_root: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    sensor = _Sensor(url, storage_root, now=1_000.0)

    def tick() -> list[str]:
        return [e.partition for e in sensor.tick()]

    day_start = H21 - 21 * HOUR_MS
    _report(url, H22 + CLOSING_MS - 1, backlog=500)  # 21:00 is not closed yet: 1 ms short
    # but the day's hours before the stream began are, empty: the day can become complete
    assert tick() == [partition_key_for(day_start + h * HOUR_MS) for h in range(21)]
    _report(url, H22 + CLOSING_MS, backlog=500)
    assert tick() == [partition_key_for(H21)]
    assert tick() == []  # recorded once
    _report(url, H23 + 50 * 60_000, backlog=500)  # 22:00 closed; 23:00 not by the watermark
    assert tick() == [partition_key_for(H22)]
    _report(url, H23 + 50 * 60_000, backlog=0)  # the replay is over, the fleet caught up
    sensor.now += 200
    assert tick() == []  # idle, but not for long enough
    sensor.now += 200
    assert tick() == [partition_key_for(H23)]
    assert json.loads(sensor.cursor)["events"]["closed"] == H23


def test_a_replayed_stretch_closes_in_one_tick_and_is_requested_at_once(
    storage_root: Path, tmp_path: Path
) -> None:
    """Event time years behind the wall clock (a replay): hours the watermark passes are held,
    and when the fleet idles the whole day closes in one tick, which automation requests
    in one evaluation (one backfill, one run by the single-run policy), not one per tick."""
    url = f"sqlite:///{tmp_path / 'control.db'}"
    sensor = _Sensor(url, storage_root, now=datetime(2026, 11, 25, tzinfo=UTC).timestamp())

    def tick() -> list[str]:
        return [e.partition for e in sensor.tick()]

    _report(url, H22 + CLOSING_MS, backlog=500)  # 21:00 and the day's empty hours closed
    assert tick() == []  # held: the replay goes on
    _report(url, H23 + 50 * 60_000, backlog=500)
    sensor.now += 10
    assert tick() == []
    _report(url, H23 + 50 * 60_000, backlog=0)  # the replay is over, the fleet caught up
    sensor.now += 301
    day_start = H21 - 21 * HOUR_MS
    day = [partition_key_for(day_start + h * HOUR_MS) for h in range(24)]
    closed = tick()
    assert closed == day  # the whole stretch, in one tick

    defs, instance = _defs(tmp_path / "defs"), dg.DagsterInstance.ephemeral()
    for partition in closed:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=RAW_ARCHIVE_KEY, partition=partition)
        )
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    for view in VIEWS:
        assert first.get_requested_partitions(corrected_key(view.name)) == set(day)


def test_the_end_of_a_bounded_input_closes_the_last_hours_once_checkpointed(
    storage_root: Path, tmp_path: Path
) -> None:
    """A finished replay recorded its topic's end offsets: the last hours close on the first
    tick after every task checkpointed through them, with no idle wait (idle_close_s 300 s
    never passes here); input produced after the mark voids it."""
    url = f"sqlite:///{tmp_path / 'control.db'}"
    sensor = _Sensor(url, storage_root, now=datetime(2026, 11, 25, tzinfo=UTC).timestamp())

    def tick() -> list[tuple[str, str]]:
        sensor.now += 10
        return [(e.partition, e.metadata["closed_by"].value) for e in sensor.tick()]

    store = ControlStore(url)
    store.input_ends.record("events", {p: 1000 for p in range(4)})
    store.close()
    last = H23 + 50 * 60_000  # the replay's last event: 23:00 is not closed by the watermark
    _report(url, last, backlog=500, checkpointed=400)
    assert tick() == []  # held: the replay is being read
    _report(url, last, checkpointed=995)  # caught up, not yet checkpointed through the end
    assert tick() == []
    # input beyond the mark (another producer): the mark says nothing, the idle rule waits
    _report(url, last, checkpointed=1005, end=1005)
    assert tick() == []
    _report(url, last, checkpointed=1000)  # every task durable through the end of input
    day_start = H21 - 21 * HOUR_MS
    closed = tick()
    assert [p for p, _ in closed] == [partition_key_for(day_start + h * HOUR_MS) for h in range(24)]
    assert {by for _, by in closed} == {"end_of_input"}
    assert tick() == []  # recorded once


def test_catching_up_holds_at_most_a_day_and_never_a_live_stream() -> None:
    now = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
    live = now * 1000 - CLOSING_MS - 30 * 60_000
    assert not catching_up(now, live, CLOSING_MS, 1)
    assert catching_up(now, H21, CLOSING_MS, 1)
    assert not catching_up(now, H21, CLOSING_MS, MAX_STRETCH_HOURS)
    assert not catching_up(now, None, CLOSING_MS, 1)


def _defs(tmp_path: Path) -> dg.Definitions:
    return dg.Definitions(
        assets=[raw_archive, *corrected_assets, reconciliation_report],
        asset_checks=build_correction_checks(VIEWS),
        resources={  # never used: conditions are evaluated, nothing runs
            "storage": LocalStorageResource(root=str(tmp_path / "storage")),
            "spark": LocalSparkResource(),  # never launched here
            "control_store": LocalControlStoreResource(
                sqlite_url=f"sqlite:///{tmp_path / 'control.db'}"
            ),
        },
    )


def test_hours_closed_before_a_tick_saw_them_are_still_corrected(tmp_path: Path) -> None:
    """Due is a state (never corrected, archive recorded), not an event a tick must catch: hours
    recorded before the first evaluation (automation was off, or a tick came between the
    sensor's events) are requested, all of them."""
    defs, instance = _defs(tmp_path), dg.DagsterInstance.ephemeral()
    hours = [H21, H22, H23]
    for hour in hours:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=RAW_ARCHIVE_KEY, partition=partition_key_for(hour))
        )
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    key = corrected_key(VIEWS[0].name)
    assert first.get_requested_partitions(key) == {partition_key_for(h) for h in hours}
    for hour in hours:  # the run did it
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=key, partition=partition_key_for(hour))
        )
    again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert again.get_requested_partitions(key) == set()


def test_a_closed_hour_is_corrected_and_a_corrected_checked_day_is_reported(
    tmp_path: Path,
) -> None:
    defs = _defs(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    views = [v.name for v in VIEWS if not v.disabled]

    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert first.total_requested == 0  # nothing archived: nothing to correct

    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=RAW_ARCHIVE_KEY, partition=partition_key_for(H21))
    )
    second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    for name in views:
        assert second.get_requested_partitions(corrected_key(name)) == {partition_key_for(H21)}
    assert second.get_num_requested(RECONCILIATION_REPORT_KEY) == 0

    # every hour of the day corrected and each correction's blocking check passed
    day_start = H21 - 21 * HOUR_MS
    for name in views:
        for hour in range(24):
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset_key=corrected_key(name),
                    partition=partition_key_for(day_start + hour * HOUR_MS),
                )
            )
    third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
    assert third.get_num_requested(RECONCILIATION_REPORT_KEY) == 0  # checks not passed yet
    for name in views:  # both blocking checks: the Spark job's segment rules (per run)...
        instance.report_runless_asset_event(
            dg.AssetCheckEvaluation(
                asset_key=corrected_key(name), check_name=SEGMENT_RULES_CHECK, passed=True
            )
        )
    half = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
    assert half.get_num_requested(RECONCILIATION_REPORT_KEY) == 0  # no hour compared yet
    for name in views:  # ... and the comparison, one result per hour as a range run logs them
        for hour in range(24):
            instance.report_runless_asset_event(
                hour_evaluation(
                    instance,
                    corrected_key(name),
                    partition_key_for(day_start + hour * HOUR_MS),
                    dg.AssetCheckResult(passed=True),
                )
            )
    fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=half.cursor)
    assert fourth.get_requested_partitions(RECONCILIATION_REPORT_KEY) == {"2015-02-26"}

    # the day reported; then a backfill re-corrects one of its hours: reported again
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=RECONCILIATION_REPORT_KEY, partition="2015-02-26")
    )
    fifth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=fourth.cursor)
    assert fifth.get_num_requested(RECONCILIATION_REPORT_KEY) == 0
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=corrected_key(views[0]), partition=partition_key_for(H22))
    )
    sixth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=fifth.cursor)
    assert sixth.get_requested_partitions(RECONCILIATION_REPORT_KEY) == {"2015-02-26"}


def test_an_ended_input_closes_the_hour_of_its_furthest_partition(
    storage_root: Path, tmp_path: Path
) -> None:
    """A partition whose events end hours before another's (a quiet airport at night) holds
    nothing back once every task has read the recorded end: no event is to come to any."""
    url = f"sqlite:///{tmp_path / 'control.db'}"
    sensor = _Sensor(url, storage_root, now=datetime(2026, 11, 25, tzinfo=UTC).timestamp())
    store = ControlStore(url)
    store.input_ends.record("events", {p: 1000 for p in range(4)})
    store.report_tasks(
        [
            TaskStatus(
                task=f"events:{p}",
                topic="events",
                partition=p,
                worker_id="a0",
                pid=1,
                next_offset=1000,
                end_offset=1000,
                watermark=float(H22 + 10 * 60_000 if p == 0 else H23 + 50 * 60_000),
                checkpointed_offset=1000,
            )
            for p in range(4)
        ]
    )
    store.close()
    sensor.now += 10
    closed = [e.partition for e in sensor.tick()]
    day_start = H21 - 21 * HOUR_MS
    assert closed == [partition_key_for(day_start + h * HOUR_MS) for h in range(24)]
