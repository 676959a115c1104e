"""The asset check ``archive_matches_schema`` on ``raw_archive``: do the archived files of the
run's hours match the archive schemas?

An hour's directory holds the files of every topic (each file's name starts with its topic).
Per hour of the run's partition range the check reads each topic's event files as one table
and validates it against that topic's declaration (:func:`quality.schemas.archive_events_spec`;
a column the declaration gained after a file was written reads as null, as every reader of
the archive reads it, even a required one, which is held to not-null in the files that have
it; a column the declaration has since dropped is left out, unchecked), and the hour's dead-letter files as one table (so a Kafka position
archived twice, in two files, is caught). Files, rows and violations per hour become
metadata. The check is blocking by default: a correction computed from an archive that
breaks its schema would overshadow the realtime values with wrong ones.
:func:`evaluate_archive_schema` is the body, callable without Dagster.
"""

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.constants import RAW_ARCHIVE_KEY
from assets.run_window import not_partitioned, run_hours
from orchestration.resources import StorageResource
from pipelines.archive.schema import archive_schema
from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import ViewDefinitionError
from pipelines.segments import (
    archive_dead_letters_key,
    archive_events_key,
    hour_label,
    parse_range_name,
    read_parquet,
)
from pipelines.storage import ObjectStore
from pipelines.views.model import View
from pipelines.views.topics import declaration_for, default_declarations
from quality.exceptions import SchemaViolation
from quality.schemas import validate_archive_events, validate_dead_letters

__all__ = [
    "ARCHIVE_SCHEMA_CHECK",
    "HourSchemaReport",
    "build_archive_schema_check",
    "check_archive_hour",
    "evaluate_archive_schema",
    "read_archive_hour",
    "topic_declarations",
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
    topics: tuple[str, ...] = ()
    """The topics with event files in the hour."""

    @property
    def label(self) -> str:
        return hour_label(self.hour_ms)

    @property
    def passed(self) -> bool:
        return not self.violations


def _hour_prefix(key_of: Callable[..., str], hour_ms: int) -> str:
    # Derived from the writer's key so the two can never disagree.
    return key_of(hour_ms, "t", 0, 0, 0).rpartition("/")[0] + "/"


def _topic_of(key: str) -> str | None:
    parsed = parse_range_name(key)
    return None if parsed is None else parsed[0]


def read_archive_hour(
    store: ObjectStore, hour_ms: int, dead_letters: bool = False, topic: str | None = None
) -> tuple[pa.Table | None, list[str]]:
    """The hour's archived events (or dead letters) as one table, and the files read: of
    ``topic`` only, if given (the events of different topics have different columns).

    None when the hour has no such file. Files whose layouts cannot be combined raise
    :class:`SchemaViolation` naming the files.
    """
    key_of = archive_dead_letters_key if dead_letters else archive_events_key
    keys = [k for k in store.list(_hour_prefix(key_of, hour_ms)) if k.endswith(".parquet")]
    if topic is not None:
        keys = [k for k in keys if _topic_of(k) == topic]
    return _read_files(store, hour_ms, keys)


def _read_tables(store: ObjectStore, keys: Sequence[str]) -> dict[str, pa.Table]:
    tables: dict[str, pa.Table] = {}
    for key in keys:
        try:
            tables[key] = read_parquet(store.get(key))
        except FileNotFoundError:  # removed by a task discarding uncommitted ranges
            continue
    return tables


def _read_files(
    store: ObjectStore, hour_ms: int, keys: Sequence[str]
) -> tuple[pa.Table | None, list[str]]:
    return _concat(hour_ms, _read_tables(store, keys))


def _concat(hour_ms: int, tables: dict[str, pa.Table]) -> tuple[pa.Table | None, list[str]]:
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


def _hour_topics(store: ObjectStore, hour_ms: int) -> tuple[dict[str, list[str]], list[str]]:
    """The hour's event files by topic, in topic order, and the files whose names are no
    range's (their topic cannot be told)."""
    prefix = _hour_prefix(archive_events_key, hour_ms)
    by_topic: dict[str, list[str]] = {}
    unnamed = []
    for key in store.list(prefix):
        if key.endswith(".parquet"):
            topic = _topic_of(key)
            if topic is None:
                unnamed.append(key)
            else:
                by_topic.setdefault(topic, []).append(key)
    return dict(sorted(by_topic.items())), unnamed


def _with_declared_columns(table: pa.Table, declaration: TopicDeclaration) -> pa.Table:
    """``table`` with the declaration's columns only: each declared column it lacks as nulls
    (files written before the column was declared read so everywhere), and the columns of an
    older declaration that this one no longer has left out (every reader ignores them)."""
    schema = archive_schema(declaration)
    for field in schema:
        if field.name not in table.column_names:
            table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names)


def _validate_events(
    store: ObjectStore,
    hour_ms: int,
    topic: str,
    keys: Sequence[str],
    declarations: Mapping[str, TopicDeclaration],
) -> tuple[int, int, str | None]:
    """(files, rows, violation message or None) of one topic's events of one hour, in
    ``keys``."""
    try:
        declaration = declaration_for(topic, declarations)
    except ViewDefinitionError as exc:
        return 0, 0, f"topic {topic!r}: no declaration to check its events against: {exc}"
    tables = _read_tables(store, keys)
    try:
        table, read = _concat(hour_ms, tables)
    except SchemaViolation as exc:
        return 0, 0, f"topic {topic!r}: {exc}"
    if table is None:
        return 0, 0, None
    checked, since = _declared_since(tables.values(), declaration)
    problems = [
        f"archived events of topic {topic!r}: required column {name!r} is null in {nulls} "
        "row(s) of the files that hold it"
        for name in since
        if (
            nulls := sum(
                t.column(name).null_count for t in tables.values() if name in t.schema.names
            )
        )
    ]
    try:
        validate_archive_events(_with_declared_columns(table, checked), checked)
    except SchemaViolation as exc:
        problems.insert(0, str(exc))
    return len(read), table.num_rows, "\n".join(problems) or None


def _declared_since(
    tables: Iterable[pa.Table], declaration: TopicDeclaration
) -> tuple[TopicDeclaration, list[str]]:
    """``declaration`` with each required field that some files lack (archived before it was
    declared) made nullable, and those fields: the older files read them as null, which their
    hours hold; the files that have them are held to not-null apart."""
    names = [t.schema.names for t in tables]
    required = [f.name for f in declaration.fields if f.name not in declaration.nullable_columns()]
    since = [c for c in required if any(c not in n for n in names)]
    if not since:
        return declaration, []
    fields = tuple(
        f.model_copy(update={"nullable": True}) if f.name in since else f
        for f in declaration.fields
    )
    return declaration.model_copy(update={"fields": fields}), since


def _validate_dead_letters(store: ObjectStore, hour_ms: int) -> tuple[int, int, str | None]:
    """(files, rows, violation message or None) of the hour's dead letters (every topic's:
    they share one layout)."""
    try:
        table, keys = read_archive_hour(store, hour_ms, dead_letters=True)
    except SchemaViolation as exc:
        return 0, 0, str(exc)
    if table is None:
        return 0, 0, None
    try:
        validate_dead_letters(table)
    except SchemaViolation as exc:
        return len(keys), table.num_rows, str(exc)
    return len(keys), table.num_rows, None


def check_archive_hour(
    store: ObjectStore, hour_ms: int, declarations: Mapping[str, TopicDeclaration]
) -> HourSchemaReport:
    """Validate one hour's archived events, each topic's against its declaration (from
    ``declarations``, by topic, with :func:`~pipelines.views.topics.declaration_for`'s
    ``"*"`` for topics not named), and its dead letters."""
    topics, unnamed = _hour_topics(store, hour_ms)
    event_files = events = 0
    problems = [
        f"{key}: not an archive range's file name (topic-partition-first-end), not checked"
        for key in unnamed
    ]
    for topic, keys in topics.items():
        files, rows, problem = _validate_events(store, hour_ms, topic, keys, declarations)
        event_files, events = event_files + files, events + rows
        if problem:
            problems.append(problem)
    dead_files, dead, dead_problem = _validate_dead_letters(store, hour_ms)
    if dead_problem:
        problems.append(dead_problem)
    for problem in problems:
        log.warning("archive hour %s: %s", hour_label(hour_ms), problem)
    return HourSchemaReport(
        hour_ms, event_files, events, dead_files, dead, tuple(problems), tuple(topics)
    )


def topic_declarations(views: Sequence[View]) -> dict[str, TopicDeclaration]:
    """What each archived topic's events are checked against: the views' own declarations,
    over the topics file's (for a topic no view reads, and ``"*"``)."""
    try:
        found = dict(default_declarations())
    except ViewDefinitionError as exc:  # the views' declarations may still cover every topic
        log.warning("archive schema check: %s", exc)
        found = {}
    found.update({v.topic: v.declaration for v in views if v.declaration is not None})
    return found


def evaluate_archive_schema(
    store: ObjectStore, hours: Sequence[int], declarations: Mapping[str, TopicDeclaration]
) -> dg.AssetCheckResult:
    """The check's result for ``hours`` (epoch-ms hour starts): counts and violations, each
    topic's events checked against its declaration in ``declarations``."""
    reports = [check_archive_hour(store, hour, declarations) for hour in hours]
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
                    "topics": list(r.topics),
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


def build_archive_schema_check(
    views: Sequence[View] = (), blocking: bool = True
) -> dg.AssetChecksDefinition:
    """``archive_matches_schema`` on ``raw_archive``, for the hours its run materialized; each
    topic's events are checked against its declaration (:func:`topic_declarations`)."""

    @dg.asset_check(
        asset=RAW_ARCHIVE_KEY,
        name=ARCHIVE_SCHEMA_CHECK,
        blocking=blocking,
        description="Archived events and dead letters of the run's hours match their schemas: "
        "each topic's declared types, nullability and ranges, known dead-letter reasons, "
        "unique (topic, partition, offset).",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, storage: StorageResource
    ) -> dg.AssetCheckResult:
        hours = run_hours(context)
        if hours is None:
            return not_partitioned("no hours to check")
        return evaluate_archive_schema(storage.open(), hours, topic_declarations(views))

    return _check
