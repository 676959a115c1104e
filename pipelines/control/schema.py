"""The control store's schema, kept current with Alembic migrations (``migrations/``).

Every process that opens the store brings the schema to the newest revision first, under a
lock (PostgreSQL's advisory lock; a file lock beside a SQLite database), so agents starting at
once on several machines migrate it exactly once. A database created before migrations
existed is recognised by its tables and stamped with the revision it matches. To change the
schema, change the tables and add a revision in ``migrations/versions/`` (the template is
``migrations/script.py.mako``); a test fails while the tables and the revisions disagree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from pipelines.control.sql import sqlite_file_lock

__all__ = ["head_revision", "upgrade"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
LOCK_KEY = 0x51_0C_E5  # the advisory lock of Sluice's schema migrations


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision (read once per process: every store opened checks against it)."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


@contextlib.contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction, holding the migration lock."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            yield conn
        return
    # connected before locking: a new connection may take the same lock to switch to WAL
    with engine.connect() as conn, sqlite_file_lock(engine.url.database), conn.begin():
        yield conn


def _matching_revision(conn: Connection) -> str | None:
    """The revision a database created without migrations matches, None if it is empty."""
    tables = set(inspect(conn).get_table_names())
    if "task_status" not in tables:
        return None
    return "0002" if "task_assignments" in tables else "0001"


def upgrade(engine: Engine) -> None:
    """Bring the schema behind ``engine`` to the newest revision (creating it if empty)."""
    head = head_revision()
    with engine.connect() as conn:  # the common case, without the lock: already current
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
    with _locked(engine) as conn:
        config = _config(conn)
        current = MigrationContext.configure(conn).get_current_revision()
        if current == head:
            return
        if current is None and (matching := _matching_revision(conn)) is not None:
            command.stamp(config, matching)
        command.upgrade(config, "head")
