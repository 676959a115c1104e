"""The asset check ``archive_matches_schema`` on ``raw_archive``: do the archived files of the
run's hours match the archive schemas?

Per hour of the run's partition range it reads the hour's event files and dead-letter files,
each kind as one table (so a Kafka position archived twice, in two files, is caught) and
validates them with :mod:`quality.schemas`. Files, rows and violations per hour become
metadata. The check is blocking by default: a correction computed from an archive that
breaks its schema would overshadow the realtime values with wrong ones.
:func:`evaluate_archive_schema` is the body, callable without Dagster.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.constants import RAW_ARCHIVE_KEY
from assets.run_window import not_partitioned, run_hours
from orchestration.resources import StorageResource
from pipelines.segments import (
    archive_dead_letters_key,
    archive_events_key,
    hour_label,
    read_parquet,
)
from pipelines.storage import ObjectStore
from quality.exceptions import SchemaViolation
from quality.schemas import validate_archive_events, validate_dead_letters

__all__ = [
    "ARCHIVE_SCHEMA_CHECK",
    "HourSchemaReport",
    "build_archive_schema_check",
    "check_archive_hour",
    "evaluate_archive_schema",
    "read_archive_hour",
]

log = logging.getLogger(__name__)

ARCHIVE_SCHEMA_CHECK = "archive_matches_schema"
MAX_VIOLATIONS_SHOWN = 3
"""Hours whose violations the check's description quotes; metadata has them all."""


@dataclass(frozen=True)
class HourSchemaReport:
    """What one hour of the archive holds and how it breaks the schemas (if it does)."""

    hour_ms: int
    event_files: int = 0
    events: int = 0
    dead_letter_files: int = 0
    dead_letters: int = 0
    violations: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return hour_label(self.hour_ms)

    @property
    def passed(self) -> bool:
        return not self.violations


def _hour_prefix(key_of: Callable[..., str], hour_ms: int) -> str:
    # Derived from the writer's key so the two can never disagree.
    return key_of(hour_ms, "t", 0, 0, 0).rpartition("/")[0] + "/"


def read_archive_hour(
    store: ObjectStore, hour_ms: int, dead_letters: bool = False
) -> tuple[pa.Table | None, list[str]]:
    """The hour's archived events (or dead letters) as one table, and the files read.

    None when the hour has no such file. Files whose layouts cannot be combined raise
    :class:`SchemaViolation` naming the files.
    """
    key_of = archive_dead_letters_key if dead_letters else archive_events_key
    keys = [k for k in store.list(_hour_prefix(key_of, hour_ms)) if k.endswith(".parquet")]
    tables: dict[str, pa.Table] = {}
    for key in keys:
        try:
            tables[key] = read_parquet(store.get(key))
        except FileNotFoundError:  # removed by a task discarding uncommitted ranges
            continue
    if not tables:
        return None, []
    try:
        return pa.concat_tables(tables.values(), promote_options="permissive"), list(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        first, *others = tables
        odd = [k for k in others if not tables[k].schema.equals(tables[first].schema)]
        raise SchemaViolation(
            f"files of hour {hour_label(hour_ms)} have incompatible layouts ({exc}): "
            f"{', '.join(odd[:5])} differ from {first}"
        ) from None


def _validate_hour_part(
    store: ObjectStore, hour_ms: int, dead_letters: bool
) -> tuple[int, int, str | None]:
    """(files, rows, violation message or None) of one kind of one hour."""
    validate = validate_dead_letters if dead_letters else validate_archive_events
    try:
        table, keys = read_archive_hour(store, hour_ms, dead_letters)
    except SchemaViolation as exc:
        return 0, 0, str(exc)
    if table is None:
        return 0, 0, None
    try:
        validate(table)
    except SchemaViolation as exc:
        return len(keys), table.num_rows, str(exc)
    return len(keys), table.num_rows, None


def check_archive_hour(store: ObjectStore, hour_ms: int) -> HourSchemaReport:
    """Validate one hour's archived events and dead letters."""
    event_files, events, event_problem = _validate_hour_part(store, hour_ms, False)
    dead_files, dead, dead_problem = _validate_hour_part(store, hour_ms, True)
    problems = tuple(p for p in (event_problem, dead_problem) if p)
    for problem in problems:
        log.warning("archive hour %s: %s", hour_label(hour_ms), problem)
    return HourSchemaReport(hour_ms, event_files, events, dead_files, dead, problems)


def evaluate_archive_schema(store: ObjectStore, hours: Sequence[int]) -> dg.AssetCheckResult:
    """The check's result for ``hours`` (epoch-ms hour starts): counts and violations."""
    reports = [check_archive_hour(store, hour) for hour in hours]
    failed = [r for r in reports if not r.passed]
    metadata: dict[str, Any] = {
        "hours": f"{reports[0].label} .. {reports[-1].label}" if reports else "",
        "events": sum(r.events for r in reports),
        "dead_letters": sum(r.dead_letters for r in reports),
        "event_files": sum(r.event_files for r in reports),
        "dead_letter_files": sum(r.dead_letter_files for r in reports),
        "hours_failed": len(failed),
        "per_hour": dg.MetadataValue.json(
            {
                r.label: {
                    "events": r.events,
                    "dead_letters": r.dead_letters,
                    "files": r.event_files + r.dead_letter_files,
                }
                for r in reports
            }
        ),
        "violations": dg.MetadataValue.json({r.label: list(r.violations) for r in failed}),
    }
    if failed:
        shown = [f"{r.label}: {v}" for r in failed[:MAX_VIOLATIONS_SHOWN] for v in r.violations]
        description = f"{len(failed)} of {len(reports)} hour(s) break the archive schemas\n" + (
            "\n".join(shown)
        )
    else:
        description = (
            f"{metadata['events']} events and {metadata['dead_letters']} dead letters in "
            f"{len(reports)} hour(s) match the archive schemas"
        )
    return dg.AssetCheckResult(
        passed=not failed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description=description,
    )


def build_archive_schema_check(blocking: bool = True) -> dg.AssetChecksDefinition:
    """``archive_matches_schema`` on ``raw_archive``, for the hours its run materialized."""

    @dg.asset_check(
        asset=RAW_ARCHIVE_KEY,
        name=ARCHIVE_SCHEMA_CHECK,
        blocking=blocking,
        description="Archived events and dead letters of the run's hours match their schemas: "
        "types, non-null, ranges, known dead-letter reasons, unique (topic, partition, offset).",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, storage: StorageResource
    ) -> dg.AssetCheckResult:
        hours = run_hours(context)
        if hours is None:
            return not_partitioned("no hours to check")
        return evaluate_archive_schema(storage.open(), hours)

    return _check
