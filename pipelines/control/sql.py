"""What every control-store table shares: one MetaData, the atomic upsert, SQLite's pragmas."""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, Table

__all__ = ["metadata", "sqlite_pragmas", "upsert"]

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


def sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # the busy timeout first: switching to WAL waits for another connection's transaction
    # (processes opening a new store at once) instead of failing with "database is locked"
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
