"""Storage as a Dagster resource: the storage root holding segments and the raw archive.

Assets annotate :class:`StorageResource`; the environment decides whether that is a local
directory (one machine, tests) or an S3 prefix (:mod:`orchestration.resources.s3_storage`,
imported only by the ``prod`` set: dagster-aws is slow to import, in every run worker).
"""

from __future__ import annotations

from abc import abstractmethod

import dagster as dg
from pydantic import Field

from pipelines.config import get_settings
from pipelines.storage import ObjectStore, open_store
from pipelines.tables import TablesConfig, ViewTables

__all__ = ["LocalStorageResource", "StorageResource"]


class StorageResource(dg.ConfigurableResource):
    """The storage root every asset reads and writes; subclasses say where it is."""

    @abstractmethod
    def open(self) -> ObjectStore:
        """An object store over the storage root."""

    @abstractmethod
    def location(self) -> str:
        """The storage root as a path or ``s3://`` URI, for jobs that open it themselves."""

    def open_tables(self) -> ViewTables:
        """The root's views' Iceberg tables, from the settings' catalog (docs/serving.md):
        where assets publish to and read from. The caller closes them."""
        return ViewTables(TablesConfig.from_settings(get_settings(), self.location()))


class LocalStorageResource(StorageResource):
    """A directory; unset means the settings' storage root (``<state_dir>/storage``)."""

    root: str | None = Field(
        default=None, description="Storage root directory; default from SLUICE_* settings."
    )

    def open(self) -> ObjectStore:
        settings = get_settings()
        return open_store(self.location(), settings.s3_endpoint_url, settings.storage_timeout_s)

    def location(self) -> str:
        return self.root or get_settings().resolved_storage_root
