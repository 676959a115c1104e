"""Views as Apache Iceberg tables: what any engine reads (DuckDB, Spark, Trino, Athena).

One table per view (:mod:`.schema`: the view's output columns, the window or session bounds,
``source`` and ``batch_version``; partitioned by the hour), in pyiceberg's SQL catalog on the
control store's database or in Glue (:mod:`.catalog`). The correction and the realtime
publisher replace whole hours in one commit each (:mod:`.commit`); readers scan a snapshot
(:mod:`.read`, with time travel); :mod:`.maintenance` expires snapshots, removes orphan files
and compacts an hour's files. The stream's per-task partial states stay its internal format. Whoever reads or writes
the tables is handed a :class:`.protocol.Tables` built once from the settings.

May import: ``pipelines.segments``, ``pipelines.storage``, ``pipelines.views``,
``pipelines.events`` (the declared column types), ``pipelines.kinds``, ``pipelines.exceptions``. No Dagster. (The realtime publisher, which
merges the stream's partial states, is :mod:`pipelines.serving.publisher`.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.tables.catalog import CATALOG_KINDS, TableLocationError, TablesConfig, ViewTables
    from pipelines.tables.commit import (
        PUBLISHER_TERM,
        SUMMARY_PREFIX,
        CommitOutcome,
        PublisherFenced,
        TableBusyError,
        TableConflictError,
        batch_hours,
        hour_files,
        hours_filter,
        replace_hours,
        replace_segments,
        write_hour_files,
    )
    from pipelines.tables.protocol import Tables
    from pipelines.tables.read import AsOf, read_rows, resolve_snapshot
    from pipelines.tables.schema import (
        BATCH,
        BATCH_VERSION,
        REALTIME,
        SOURCE,
        arrow_schema,
        iceberg_schema,
        iso_time,
        partition_field,
        table_rows,
    )

__all__ = [
    "BATCH",
    "BATCH_VERSION",
    "CATALOG_KINDS",
    "PUBLISHER_TERM",
    "REALTIME",
    "SOURCE",
    "SUMMARY_PREFIX",
    "AsOf",
    "CommitOutcome",
    "PublisherFenced",
    "TableBusyError",
    "TableConflictError",
    "TableLocationError",
    "Tables",
    "TablesConfig",
    "ViewTables",
    "arrow_schema",
    "batch_hours",
    "hour_files",
    "hours_filter",
    "iceberg_schema",
    "iso_time",
    "partition_field",
    "read_rows",
    "replace_hours",
    "replace_segments",
    "resolve_snapshot",
    "table_rows",
    "write_hour_files",
]

# Exported names load their module on first use (PEP 562): agents and the CLI import this
# package, and pyiceberg, slow to import, should load only where a table
# is opened, not in every process start.
_EXPORTS = {
    "CATALOG_KINDS": "pipelines.tables.catalog",
    "TableLocationError": "pipelines.tables.catalog",
    "TablesConfig": "pipelines.tables.catalog",
    "ViewTables": "pipelines.tables.catalog",
    "CommitOutcome": "pipelines.tables.commit",
    "SUMMARY_PREFIX": "pipelines.tables.commit",
    "PUBLISHER_TERM": "pipelines.tables.commit",
    "PublisherFenced": "pipelines.tables.commit",
    "TableBusyError": "pipelines.tables.commit",
    "TableConflictError": "pipelines.tables.commit",
    "batch_hours": "pipelines.tables.commit",
    "hour_files": "pipelines.tables.commit",
    "hours_filter": "pipelines.tables.commit",
    "replace_hours": "pipelines.tables.commit",
    "replace_segments": "pipelines.tables.commit",
    "write_hour_files": "pipelines.tables.commit",
    "Tables": "pipelines.tables.protocol",
    "AsOf": "pipelines.tables.read",
    "read_rows": "pipelines.tables.read",
    "resolve_snapshot": "pipelines.tables.read",
    "BATCH": "pipelines.tables.schema",
    "BATCH_VERSION": "pipelines.tables.schema",
    "REALTIME": "pipelines.tables.schema",
    "SOURCE": "pipelines.tables.schema",
    "arrow_schema": "pipelines.tables.schema",
    "iceberg_schema": "pipelines.tables.schema",
    "iso_time": "pipelines.tables.schema",
    "partition_field": "pipelines.tables.schema",
    "table_rows": "pipelines.tables.schema",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
