"""Archive completeness per hour from range records: counts, offset ranges, gaps, open hours."""

from __future__ import annotations

import json
from pathlib import Path

from orchestration.control_plane.dagster_service import prepare_dagster_home
from pipelines.segments import archive_range_key, parse_hour_label
from pipelines.storage import LocalObjectStore
from quality.completeness import archive_completeness

H21, H22, H23 = (parse_hour_label(f"2015-02-26T{h}") for h in (21, 22, 23))


def _record(store, partition: int, first: int, end: int, events: dict, dead: dict | None = None):
    record = {
        "topic": "events",
        "partition": partition,
        "first": first,
        "end": end,
        "events": events,
        "dead_letters": dead or {},
        "files": [],
    }
    store.put(archive_range_key("events", partition, first, end), json.dumps(record).encode())


def test_counts_ranges_gaps_and_open_partitions(tmp_path: Path) -> None:
    store = LocalObjectStore(str(tmp_path))
    _record(store, 0, 0, 100, {"2015-02-26T21": 100})
    _record(store, 0, 100, 150, {"2015-02-26T21": 10, "2015-02-26T22": 40}, {"2015-02-26T22": 2})
    _record(store, 0, 170, 200, {"2015-02-26T22": 30})  # 150..170 never archived
    _record(store, 1, 0, 80, {"2015-02-26T21": 80})
    h21, h22, h23 = archive_completeness(store, [H21, H22, H23])

    assert (h21.events, h21.dead_letters, h21.range_records) == (190, 0, 3)
    assert h21.offset_ranges == {"events-0": [(0, 150)], "events-1": [(0, 80)]}
    assert h21.gaps == {}
    assert h21.open_partitions == ("events-1",)  # partition 1 has nothing later yet
    assert not h21.complete

    assert (h22.events, h22.dead_letters) == (70, 2)
    assert h22.offset_ranges == {"events-0": [(100, 150), (170, 200)]}
    assert h22.gaps == {"events-0": [(150, 170)]}
    assert not h22.complete

    assert h23.events == 0 and h23.partitions == () and not h23.complete
    assert h22.as_dict()["gaps"] == {"events-0": [[150, 170]]}


def test_a_closed_hour_without_gaps_is_complete(tmp_path: Path) -> None:
    store = LocalObjectStore(str(tmp_path))
    _record(store, 0, 0, 10, {"2015-02-26T21": 10})
    _record(store, 0, 10, 20, {"2015-02-26T22": 10})
    (h21,) = archive_completeness(store, [H21])
    assert h21.complete


def test_dagster_home_is_absolute_with_telemetry_off_and_nux_seen(tmp_path: Path) -> None:
    import dagster as dg

    home = prepare_dagster_home(tmp_path / "state")
    assert home.is_absolute() and home == (tmp_path / "state" / "dagster").resolve()
    assert "telemetry:\n  enabled: false\n" in (home / "dagster.yaml").read_text()
    instance = dg.DagsterInstance.from_config(str(home))
    try:  # one Spark correction at a time: the spark pool's limit
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    finally:
        instance.dispose()
    assert (home / ".nux" / "nux.yaml").read_text() == "seen: 1\n"
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n# user edit\n")
    prepare_dagster_home(tmp_path / "state")  # idempotent, keeps the user's config
    assert "user edit" in (home / "dagster.yaml").read_text()
