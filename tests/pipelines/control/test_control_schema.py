"""The control store's schema is migrated with Alembic: from empty, from a store created before
the job model, by many processes at once, and the revisions match the tables."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from pipelines.control import ControlStore, TaskStatus
from pipelines.control.schema import _config, head_revision
from pipelines.control.sql import metadata


def test_the_revisions_build_exactly_the_tables(control_url: str) -> None:
    ControlStore(control_url).close()
    engine = create_engine(control_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn)
            assert context.get_current_revision() == head_revision()
            differences = [
                d
                for d in compare_metadata(context, metadata)
                if not (isinstance(d, tuple) and d[0] in ("add_index", "remove_index"))
            ]
        assert differences == [], "the tables changed without a migration"
    finally:
        engine.dispose()


def test_a_store_from_before_the_job_model_is_upgraded_keeping_its_data(control_url) -> None:
    from alembic import command

    engine = create_engine(control_url)
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0001")
        conn.execute(text("DROP TABLE alembic_version"))  # as create_all left it
        conn.execute(
            text(
                "INSERT INTO task_status VALUES ('events:0', 'events', 0, 'w0', 1, 10, 9, 1, 0,"
                " 0.5, 0.1, 3.0, 10, 12, 2, NULL, NULL, 10, 1.0, 'running', '{}')"
            )
        )
    engine.dispose()
    store = ControlStore(control_url)
    try:
        (row,) = store.tasks()
        assert (row.task, row.consumed, row.generation) == ("events:0", 10, 0)
        store.jobs.ensure_tasks("events", [0])  # the job model's tables exist now
        store.report_tasks(
            [TaskStatus("events:0", "events", 0, "a0", 2, consumed=20, generation=1)]
        )
        assert store.tasks()[0].consumed == 20
        assert "task_assignments" in inspect(store.engine).get_table_names()
    finally:
        store.close()


def _open_at_once(url: str, processes: int = 5) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(processes)

    def open_store() -> None:
        barrier.wait()
        try:
            ControlStore(url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_processes_opening_an_empty_store_at_once_migrate_it_once(control_url) -> None:
    assert _open_at_once(control_url) == []
    engine = create_engine(control_url)
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == head_revision()
    engine.dispose()


def test_new_sqlite_stores_opened_at_once_never_report_locked(tmp_path) -> None:
    """Switching a new SQLite file to WAL raced (about 1 in 10 rounds) before it was locked."""
    for round_ in range(20):
        url = f"sqlite:///{tmp_path / f'control-{round_}.db'}"
        assert _open_at_once(url) == [], f"round {round_}"
