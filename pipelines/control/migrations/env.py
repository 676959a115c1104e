"""Alembic's environment for the control store: run on the connection the store hands over."""

from __future__ import annotations

from alembic import context

from pipelines.control.sql import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying
)
with context.begin_transaction():
    context.run_migrations()
