"""Views as Apache Iceberg tables: what any engine reads (DuckDB, Spark, Trino, Athena).

One table per view (:mod:`.schema`: the view's output columns, the window or session bounds,
``source`` and ``batch_version``; partitioned by the hour), in pyiceberg's SQL catalog on the
control store's database or in Glue (:mod:`.catalog`). The correction and the realtime
publisher replace whole hours in one commit each (:mod:`.commit`); readers scan a snapshot
(:mod:`.read`, with time travel); :mod:`.maintenance` expires snapshots, removes orphan files
and compacts an hour's files. The stream's per-task partial states stay its internal format.

May import: ``pipelines.segments``, ``pipelines.storage``, ``pipelines.views``,
``pipelines.exceptions``. No Dagster. (The realtime publisher, which merges the
stream's partial states, is :mod:`pipelines.serving.publisher`.)
"""

from pipelines.tables.catalog import CATALOG_KINDS, TableLocationError, TablesConfig, ViewTables
from pipelines.tables.commit import (
    SUMMARY_PREFIX,
    CommitOutcome,
    TableConflictError,
    batch_hours,
    hour_files,
    hours_filter,
    replace_hours,
    write_hour_files,
)
from pipelines.tables.read import AsOf, read_rows, resolve_snapshot
from pipelines.tables.registry import forget_tables, register_tables, tables_for
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
    "REALTIME",
    "SOURCE",
    "SUMMARY_PREFIX",
    "AsOf",
    "CommitOutcome",
    "TableConflictError",
    "TableLocationError",
    "TablesConfig",
    "ViewTables",
    "arrow_schema",
    "batch_hours",
    "forget_tables",
    "hour_files",
    "hours_filter",
    "iceberg_schema",
    "iso_time",
    "partition_field",
    "read_rows",
    "register_tables",
    "replace_hours",
    "resolve_snapshot",
    "table_rows",
    "tables_for",
    "write_hour_files",
]
