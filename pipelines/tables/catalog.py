"""The Iceberg catalog and the table of each view.

The catalog is pyiceberg's SQL catalog on the control store's database (SQLite on one
machine, PostgreSQL for a fleet: the same ``iceberg_tables`` rows Trino's JDBC catalog
reads), or AWS Glue by configuration (for Athena). The warehouse is the storage root: a
view's table lives under ``<root>/tables/<view>/`` (``data/`` and ``metadata/``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from pipelines.exceptions import SluiceError
from pipelines.tables.schema import arrow_schema, iceberg_schema, partition_field
from pipelines.views.model import View

__all__ = ["CATALOG_KINDS", "TableLocationError", "TablesConfig", "ViewTables"]

log = logging.getLogger(__name__)

CATALOG_KINDS = ("sql", "glue")
FINGERPRINT = "sluice.view-fingerprint"
"""Table property: the definition the table's columns were last evolved for."""
NAME_MAPPING = "schema.name-mapping.default"
"""Sluice's Parquet files carry no field ids: readers map their columns by name."""
TABLE_PROPERTIES = {
    # Sluice retries a commit itself after re-reading the table (a realtime commit must see a
    # batch correction that landed meanwhile); pyiceberg's own rebasing retry must not.
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "zstd",
    "format-version": "2",
    # one metadata file per commit: keep the last few, delete older ones as they fall out
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


@dataclass(frozen=True)
class TablesConfig:
    """Where the catalog and the warehouse are (see :meth:`from_settings`)."""

    warehouse: str
    """The storage root: a directory or s3://bucket/prefix."""
    catalog_url: str = ""
    """SQLAlchemy URL of the SQL catalog (the control store's)."""
    kind: str = "sql"
    namespace: str = "sluice"
    s3_endpoint_url: str | None = None
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Any, warehouse: str | None = None) -> TablesConfig:
        """From :class:`pipelines.config.SluiceSettings` (``warehouse``: another storage root)."""
        import json

        return cls(
            warehouse=warehouse or settings.resolved_storage_root,
            catalog_url=settings.tables_catalog_url or settings.resolved_control_store_url,
            kind=settings.tables_catalog,
            namespace=settings.tables_namespace,
            s3_endpoint_url=settings.s3_endpoint_url,
            properties=json.loads(settings.tables_catalog_properties or "{}"),
        )

    def table_location(self, view: str) -> str:
        root = self.warehouse
        if "://" not in root:
            root = str(Path(root).expanduser().resolve())
        return f"{root.rstrip('/')}/tables/{view}"

    def catalog_properties(self) -> dict[str, str]:
        props: dict[str, str] = {}
        if self.kind == "sql":
            props["uri"] = self.catalog_url
            if self.catalog_url.startswith("sqlite"):
                props["echo"] = "false"
        props["warehouse"] = self.warehouse
        if self.s3_endpoint_url:
            props["s3.endpoint"] = self.s3_endpoint_url
            props["s3.force-virtual-addressing"] = "false"
        return {**props, **self.properties}


def _open_catalog(config: TablesConfig) -> Catalog:
    props = config.catalog_properties()
    if config.kind == "glue":
        from pyiceberg.catalog.glue import GlueCatalog

        return GlueCatalog("sluice", **props)
    if config.kind == "sql":
        return _sql_catalog(props)
    raise ValueError(f"unknown catalog kind {config.kind!r} (known: {', '.join(CATALOG_KINDS)})")


def _sql_catalog(props: dict[str, str]) -> Catalog:
    """pyiceberg creates its two tables if missing; processes starting together may race."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri = props.get("uri", "")
    if uri.startswith("sqlite:///"):  # as the control store does: its directory may be new
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(5):
        try:
            return SqlCatalog("sluice", **props)
        except SQLAlchemyError:
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


class TableLocationError(SluiceError, ValueError):
    """The catalog's table of a view lives under another storage root."""


def _check_location(table: Table, expected: str) -> None:
    """One catalog may serve several storage roots only under different namespaces: a table
    found at another root's location would mix two roots' data."""
    if table.location().rstrip("/") != expected.rstrip("/"):
        name = ".".join(table.name())
        raise TableLocationError(
            f"the catalog's table {name} lives at {table.location()}, not under this storage "
            f"root ({expected}): this catalog (SLUICE_TABLES_CATALOG_URL, default the control "
            "store) already serves another storage root; give this one its own "
            "SLUICE_TABLES_NAMESPACE or catalog"
        )


class ViewTables:
    """The table of every view, created on first use and evolved with the view's columns."""

    def __init__(self, config: TablesConfig) -> None:
        self.config = config
        self.catalog = _open_catalog(config)
        self._ready: set[tuple[str, str]] = set()

    def close(self) -> None:
        """Release the SQL catalog's connections."""
        engine = getattr(self.catalog, "engine", None)
        if engine is not None:
            engine.dispose()

    def identifier(self, view: str) -> tuple[str, str]:
        return (self.config.namespace, view)

    def name(self, view: str) -> str:
        """``namespace.view``, as engines name the table."""
        return ".".join(self.identifier(view))

    def load(self, view: View) -> Table:
        """The view's table, created (or evolved to the view's columns) if needed."""
        ident = self.identifier(view.name)
        if (view.name, view.fingerprint) in self._ready:
            return self.catalog.load_table(ident)
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            table = self._create(view)
        _check_location(table, self.config.table_location(view.name))
        if table.properties.get(FINGERPRINT) != view.fingerprint:
            table = self._evolve(table, view)
        self._ready.add((view.name, view.fingerprint))
        return table

    def find(self, view: str) -> Table | None:
        """The view's table if it exists (readers never create one)."""
        try:
            return self.catalog.load_table(self.identifier(view))
        except NoSuchTableError:
            return None

    def _create(self, view: View) -> Table:
        from pyiceberg.partitioning import PartitionSpec

        with contextlib.suppress(NamespaceAlreadyExistsError, IntegrityError):
            self.catalog.create_namespace(self.config.namespace)  # or another process did
        schema = iceberg_schema(view)
        source = schema.find_field(partition_field(view))
        from pyiceberg.partitioning import PartitionField
        from pyiceberg.transforms import HourTransform

        spec = PartitionSpec(
            PartitionField(
                source_id=source.field_id,
                field_id=1000,
                transform=HourTransform(),
                name=f"{source.name}_hour",
            )
        )
        try:
            return self.catalog.create_table(
                self.identifier(view.name),
                schema=schema,
                partition_spec=spec,
                location=self.config.table_location(view.name),
                properties={
                    **TABLE_PROPERTIES,
                    FINGERPRINT: view.fingerprint,
                    NAME_MAPPING: schema.name_mapping.model_dump_json(),
                },
            )
        except TableAlreadyExistsError:
            return self.catalog.load_table(self.identifier(view.name))

    def _evolve(self, table: Table, view: View) -> Table:
        """Add the columns a changed definition has (old ones stay, null in new rows)."""
        for _ in range(5):
            try:
                with table.transaction() as tx:
                    with tx.update_schema() as update:
                        update.union_by_name(arrow_schema(view))
                    tx.set_properties({FINGERPRINT: view.fingerprint})
                schema = self.catalog.load_table(table.name()).schema()
                with self.catalog.load_table(table.name()).transaction() as tx:
                    tx.set_properties({NAME_MAPPING: schema.name_mapping.model_dump_json()})
                return self.catalog.load_table(table.name())
            except CommitFailedException:
                table = self.catalog.load_table(table.name())
        raise CommitFailedException(f"could not evolve {table.name()} to {view.name}'s columns")
