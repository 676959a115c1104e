"""The on-disk format, in one folder: every key under the storage root, the time units the
keys use, range records and the Parquet helpers. Everything that reads or writes the storage
root imports them from here::

    segments/<view>/<segment>/realtime/<topic>-<partition>.parquet   a task's partials (version 0)
    checkpoints/<topic>/<partition>/g<generation>.parquet             a task's state and offsets
    archive/events/hour=<hour>/<topic>-<partition>-<first>-<end>.parquet
    archive/dead_letters/hour=<hour>/<topic>-<partition>-<first>-<end>.parquet
    archive/ranges/<topic>/<partition>/<first>-<end>.json             what one flush archived
    reports/<YYYY-MM-DD>/reconciliation.{html,md,json}                a day's reconciliation report
    changes/<view>/<at>-<topic>-<partition>-g<generation>-<nonce>.json  segments a flush rewrote
    rewrites/<view>.json                                              a split's or merge's record
    rewrites/<view>/<rewrite id>/segments/...                         its new files, staged

``<segment>`` and ``<hour>`` are UTC hours such as ``2015-02-26T21`` (:mod:`.time`); times
inside files are epoch milliseconds. Realtime files are read only through
:func:`read_realtime`, which sees a split's or merge's rewrite whole (:mod:`.rewrites`). Parquet files are zstd (:mod:`.parquet`). Corrections
live in the views' tables (``tables/<view>/``, :mod:`pipelines.tables`); the layout before
the tables is known only to ``sluice tables migrate`` (:mod:`pipelines.serving.older_layout`).

May import: ``pipelines.exceptions`` and ``pipelines.storage`` only.
"""

from pipelines.segments.changes import (
    CHANGES_PREFIX,
    ChangeLog,
    ChangeRecord,
    change_records,
    changes_prefix,
    oldest_change_ms,
    record_change,
    table_lag_s,
)
from pipelines.segments.columns import STATE_SUFFIX, is_state_column, state_column
from pipelines.segments.layout import (
    RANGES_PREFIX,
    REPORT_FORMATS,
    REPORTS_PREFIX,
    archive_dead_letters_key,
    archive_events_key,
    archive_range_key,
    archive_ranges_prefix,
    bucket_suffix,
    checkpoint_generation,
    checkpoint_key,
    checkpoint_prefix,
    legacy_checkpoint_key,
    parse_checkpoint_key,
    parse_range_name,
    parse_task_checkpoint_key,
    parse_task_label,
    realtime_key,
    realtime_prefix,
    report_keys,
    segment_prefix,
    task_label,
    view_prefix,
)
from pipelines.segments.metadata import (
    SEGMENT_KINDS,
    SegmentMeta,
    segment_meta,
    segment_schema,
    written_for,
)
from pipelines.segments.parquet import ParquetStream, read_parquet, to_parquet
from pipelines.segments.ranges import RangeRecord, hours_with_events, read_range_records
from pipelines.segments.rewrites import (
    RealtimeRewrite,
    RewriteFenced,
    RewriteUnsettled,
    fence,
    read_realtime,
    read_rewrite_record,
)
from pipelines.segments.time import (
    HOUR_MS,
    hour_label,
    hour_runs,
    hour_start,
    hours_in_window,
    parse_hour_label,
)

__all__ = [
    "CHANGES_PREFIX",
    "HOUR_MS",
    "RANGES_PREFIX",
    "REPORTS_PREFIX",
    "REPORT_FORMATS",
    "SEGMENT_KINDS",
    "STATE_SUFFIX",
    "ChangeLog",
    "ChangeRecord",
    "ParquetStream",
    "RangeRecord",
    "RealtimeRewrite",
    "RewriteFenced",
    "RewriteUnsettled",
    "SegmentMeta",
    "archive_dead_letters_key",
    "archive_events_key",
    "archive_range_key",
    "archive_ranges_prefix",
    "bucket_suffix",
    "change_records",
    "changes_prefix",
    "checkpoint_generation",
    "checkpoint_key",
    "checkpoint_prefix",
    "fence",
    "hour_label",
    "hour_runs",
    "hour_start",
    "hours_in_window",
    "hours_with_events",
    "is_state_column",
    "legacy_checkpoint_key",
    "oldest_change_ms",
    "parse_checkpoint_key",
    "parse_hour_label",
    "parse_range_name",
    "parse_task_checkpoint_key",
    "parse_task_label",
    "read_parquet",
    "read_range_records",
    "read_realtime",
    "read_rewrite_record",
    "realtime_key",
    "realtime_prefix",
    "record_change",
    "report_keys",
    "segment_meta",
    "segment_prefix",
    "segment_schema",
    "state_column",
    "table_lag_s",
    "task_label",
    "to_parquet",
    "view_prefix",
    "written_for",
]
