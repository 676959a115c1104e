"""The leader's realtime publisher never holds up the heartbeat: not while a pass commits, and
not while its first pass opens the tables (imports pyiceberg, connects the catalog), which
takes seconds: inside the control tick it can cost a new leader its lease."""

from __future__ import annotations

import threading

from orchestration.control_plane.fleet.publishing import PublisherRunner
from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.storage import LocalObjectStore
from pipelines.tables import TablesConfig, ViewTables
from pipelines.views import load_views
from tests.fixtures.processes import wait_until


def test_opening_the_publisher_happens_outside_the_control_tick(tmp_path) -> None:
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    store = LocalObjectStore(tmp_path / "root")
    opened = threading.Event()
    may_open = threading.Event()

    def tables() -> ViewTables:
        opened.set()
        assert may_open.wait(30), "the test never let the tables open"
        return ViewTables(
            TablesConfig(warehouse=str(tmp_path / "root"), catalog_url=f"sqlite:///{tmp_path}/c.db")
        )

    runner = PublisherRunner(store, tables, lambda: views, SluiceSettings(state_dir=tmp_path))
    ticked = threading.Thread(target=runner.tick, args=(True,), daemon=True)
    ticked.start()
    ticked.join(timeout=10)
    assert not ticked.is_alive(), "the control tick waited for the tables to open"
    wait_until(opened.is_set, 10, "the publisher's thread to open the tables")
    runner.tick(True)  # a pass under way (still opening): the next tick starts none
    may_open.set()
    wait_until(lambda: runner.last is not None, 60, "the first pass")
    assert runner.publisher is not None
    runner.join(5)
