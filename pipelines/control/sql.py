"""What every control-store table shares: one MetaData, the atomic upsert, SQLite's pragmas."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, Table

__all__ = ["metadata", "sqlite_file_lock", "sqlite_pragmas", "upsert"]

metadata = MetaData()


def upsert(
    conn: Any,
    table: Table,
    key: dict[str, Any],
    values: dict[str, Any],
    on_insert: dict[str, Any] | None = None,
    only_if: Any = None,
) -> None:
    """Update the row with ``key`` (one or more key columns), or insert it (with ``on_insert``
    too), atomically: the dialect's ``INSERT ... ON CONFLICT DO UPDATE`` on SQLite and
    PostgreSQL, so two writers of the same row never race into a duplicate-key error. With
    ``only_if`` (a condition on the stored row), an existing row is updated only when it holds."""
    row = {**key, **values, **(on_insert or {})}
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        statement = insert(table).values(**row)
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=list(key),
                set_={c: statement.excluded[c] for c in values},
                where=only_if,
            )
        )
        return
    match = [table.c[column] == value for column, value in key.items()]
    if only_if is not None:
        match.append(only_if)
    updated = conn.execute(table.update().where(*match).values(**values))
    if updated.rowcount == 0 and only_if is None:
        conn.execute(table.insert().values(**row))


@contextlib.contextmanager
def sqlite_file_lock(database: str | None) -> Iterator[None]:
    """An exclusive lock beside a SQLite database file, across processes (none in memory)."""
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def sqlite_pragmas(dbapi_connection: Any, _record: Any, busy_timeout_ms: int = 10_000) -> None:
    cursor = dbapi_connection.cursor()
    # the busy timeout first, so writers wait for each other instead of failing
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        # switching to WAL is not covered by the busy timeout: two connections switching a new
        # database at once fail with "database is locked" (11 in 100 when five processes open
        # an empty store together), so the switch (kept in the file, done once) is serialized
        database = next(
            (row[2] for row in cursor.execute("PRAGMA database_list") if row[1] == "main"), None
        )
        with sqlite_file_lock(database and str(Path(database))):
            cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
