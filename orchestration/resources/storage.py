"""Storage as a Dagster resource: the storage root holding segments and the raw archive.

Assets annotate :class:`StorageResource`; the environment decides whether that is a local
directory (one machine, tests) or an S3 prefix reached through dagster-aws' ``S3Resource``.
"""

from __future__ import annotations

from abc import abstractmethod

import dagster as dg
from dagster_aws.s3 import S3Resource
from pydantic import Field

from pipelines.config import get_settings
from pipelines.storage import ObjectStore, open_store
from pipelines.tables import TablesConfig, ViewTables, register_tables, tables_for

__all__ = ["LocalStorageResource", "S3StorageResource", "StorageResource"]


def _with_tables(store: ObjectStore) -> ObjectStore:
    """The root's views publish to and are read from their Iceberg tables (docs/serving.md)."""
    if tables_for(store) is None:
        root = store.root
        register_tables(root, lambda: ViewTables(TablesConfig.from_settings(get_settings(), root)))
    return store


class StorageResource(dg.ConfigurableResource):
    """The storage root every asset reads and writes; subclasses say where it is."""

    @abstractmethod
    def open(self) -> ObjectStore:
        """An object store over the storage root."""

    @abstractmethod
    def location(self) -> str:
        """The storage root as a path or ``s3://`` URI, for jobs that open it themselves."""


class LocalStorageResource(StorageResource):
    """A directory; unset means the settings' storage root (``<state_dir>/storage``)."""

    root: str | None = Field(
        default=None, description="Storage root directory; default from SLUICE_* settings."
    )

    def open(self) -> ObjectStore:
        settings = get_settings()
        return _with_tables(
            open_store(self.location(), settings.s3_endpoint_url, settings.storage_timeout_s)
        )

    def location(self) -> str:
        return self.root or get_settings().resolved_storage_root


class S3StorageResource(StorageResource):
    """An ``s3://bucket/prefix`` root; credentials and region come from the nested S3Resource."""

    root: str = Field(description="s3://bucket/prefix of the storage root.")
    s3: S3Resource = Field(default_factory=S3Resource, description="boto3 S3 client settings.")

    def open(self) -> ObjectStore:
        from pipelines.storage.s3 import S3ObjectStore

        store = S3ObjectStore(self.root, endpoint_url=self.s3.endpoint_url)
        store.client = self.s3.get_client()  # the resource's credentials, region and retries
        return _with_tables(store)

    def location(self) -> str:
        return self.root
