"""The control store as a Dagster resource: task metrics in, view deployments out.

SQLite under the state directory locally; any SQLAlchemy URL (PostgreSQL) in production,
where the URL carries a password and so comes from ``dg.EnvVar``.
"""

from __future__ import annotations

from abc import abstractmethod

import dagster as dg
from pydantic import Field

from pipelines.config import get_settings
from pipelines.control import ControlStore

__all__ = ["ControlStoreResource", "LocalControlStoreResource", "SqlControlStoreResource"]


class ControlStoreResource(dg.ConfigurableResource):
    """Where workers report and where view deployments are recorded."""

    @abstractmethod
    def url(self) -> str:
        """The SQLAlchemy URL of the control store."""

    def open(self) -> ControlStore:
        """A connected store; callers ``close()`` it when done."""
        return ControlStore(self.url(), get_settings().control_store_timeout_s)


class LocalControlStoreResource(ControlStoreResource):
    """SQLite; unset means ``sqlite:///<state_dir>/control.db`` from the settings."""

    sqlite_url: str | None = Field(
        default=None, description="sqlite:///path; default from settings."
    )

    def url(self) -> str:
        return self.sqlite_url or get_settings().resolved_control_store_url


class SqlControlStoreResource(ControlStoreResource):
    """A shared database (PostgreSQL) for a fleet on many machines."""

    database_url: str = Field(description="SQLAlchemy URL, e.g. postgresql+psycopg://...")

    def url(self) -> str:
        return self.database_url
