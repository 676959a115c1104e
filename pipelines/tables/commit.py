"""Replacing hours of a view's table in one snapshot commit, with retries on conflicts.

Both writers go through :func:`replace_hours`: the correction (``source=batch``: the Parquet
files it wrote are added, the hours' previous rows deleted, in one transaction) and the
realtime publisher (``source=realtime``: rows appended the same way). Each attempt re-reads the
table, so what it decides is decided on the snapshot it commits on top of: the catalog's
compare-and-swap (``metadata_location`` in the SQL catalog) fails the commit if another writer
committed meanwhile, and the attempt starts over. Two corrections of one hour therefore end
with one of them, whole; a realtime commit never replaces an hour that holds batch rows.

A correction never waits behind the publisher: before its first attempt it claims the table's
next turn (a small file beside the table, ``<table location>.batch-turn``, valid for
:data:`BATCH_TURN_S` and renewed by each later attempt that starts past half of it), and a
realtime commit that finds a live claim gives way (:class:`TableBusyError`; the publisher tries
again at its next pass). A correction whose commit lost to a realtime commit already under way
thus commits at its next attempt; one that died mid-commit holds the realtime commits back no
longer than :data:`BATCH_TURN_S`.

A realtime commit made under the fleet's coordinator lease carries its term (``term``): the
commit records it in the table property :data:`PUBLISHER_TERM`, and a commit whose term is lower
than the one recorded there is refused (:class:`PublisherFenced`). The check is made on the
snapshot the commit goes on top of, so a former leader's pass, paused between its last look at
the lease and its commit, cannot put an older read over the new leader's commit.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import (
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    LessThan,
    Or,
)
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_file_to_data_file,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from sqlalchemy.exc import OperationalError

from pipelines.exceptions import SluiceError
from pipelines.segments import HOUR_MS, hour_label, hour_runs
from pipelines.tables.protocol import Tables
from pipelines.tables.schema import (
    BATCH,
    BATCH_VERSION,
    REALTIME,
    SOURCE,
    iso_time,
    partition_field,
)
from pipelines.views.model import View

__all__ = [
    "BATCH_TURN_S",
    "PUBLISHER_TERM",
    "SUMMARY_PREFIX",
    "CommitOutcome",
    "PublisherFenced",
    "TableBusyError",
    "TableConflictError",
    "batch_hours",
    "hour_files",
    "hours_filter",
    "replace_hours",
    "replace_segments",
    "write_hour_files",
]

log = logging.getLogger(__name__)

SUMMARY_PREFIX = "sluice."
MAX_ATTEMPTS = 20
BATCH_TURN_S = 20.0
"""How long a correction's claim on the next commit holds unless released or renewed (a
correction that died mid-commit blocks the publisher no longer than this): a few of its
attempts, each renewing it, and within a minute of a dead correction realtime rows flow again."""


class TableConflictError(SluiceError, RuntimeError):
    """Every attempt met a concurrent commit (reported, never a half-written hour)."""


class TableBusyError(SluiceError, RuntimeError):
    """A realtime commit gave way to a correction that claimed the table's next turn."""


class PublisherFenced(SluiceError, RuntimeError):
    """A realtime commit carried a coordinator term lower than one that committed already."""

    def __init__(self, view: str, term: int, newer: int) -> None:
        super().__init__(
            f"{view}: realtime commit under coordinator term {term} refused: term {newer} "
            "committed after it (a newer leader publishes)"
        )
        self.term = term
        self.newer = newer


PUBLISHER_TERM = "sluice.publisher-term"
"""The table property holding the highest coordinator term a realtime commit carried."""


@dataclass(frozen=True)
class CommitOutcome:
    snapshot_id: int | None
    """The committed snapshot (None if nothing was committed)."""
    hours: tuple[int, ...]
    """The hours replaced."""
    skipped: tuple[int, ...]
    """Hours left alone: realtime rows for an hour the batch has corrected."""
    version: int
    """The batch version committed (0 for realtime)."""
    attempts: int
    files: tuple[str, ...] = ()
    """The data files added."""
    versions: tuple[int, ...] = ()
    """:func:`replace_segments`: the batch version of each segment, in its order."""
    file_of_hour: Mapping[int, str] = field(default_factory=dict)
    """The data file added for each hour that has rows."""


def hours_filter(view: View, hours: Iterable[int]) -> BooleanExpression:
    """Rows whose partition column falls in any of ``hours`` (hour starts, epoch ms).

    Consecutive hours make one range: pyiceberg evaluates every term for every manifest
    entry, and a day as 24 terms took longer to plan than 24 scans of one hour each."""
    col = partition_field(view)
    terms: list[BooleanExpression] = [
        And(GreaterThanOrEqual(col, iso_time(start)), LessThan(col, iso_time(end)))
        for start, end in hour_runs(hours)
    ]
    if not terms:
        raise ValueError("no hours to filter")
    expr = terms[0]
    for term in terms[1:]:
        expr = Or(expr, term)
    return expr


def batch_hours(
    table: Table, view: View, hours: Iterable[int] | None = None, *, count: bool = False
) -> dict[int, int]:
    """Hour -> batch version (``count``: batch rows) of the hours that hold batch rows in the
    table's current snapshot."""
    if table.current_snapshot() is None:
        return {}
    row_filter: BooleanExpression = EqualTo(SOURCE, BATCH)
    if hours is not None:
        hours = list(hours)
        if not hours:
            return {}
        row_filter = And(row_filter, hours_filter(view, hours))
    col = partition_field(view)
    found = table.scan(row_filter=row_filter, selected_fields=(col, BATCH_VERSION)).to_arrow()
    if found.num_rows == 0:
        return {}
    ms = found.column(col).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_numpy()
    versions = found.column(BATCH_VERSION).to_numpy()
    out: dict[int, int] = {}
    for t, v in zip(ms, versions, strict=True):
        h = int(t) - int(t) % HOUR_MS
        out[h] = out.get(h, 0) + 1 if count else max(out.get(h, 0), int(v))
    return out


def replace_hours(
    tables: Tables,
    view: View,
    hours: Iterable[int],
    rows: Callable[[int], pa.Table] | pa.Table,
    *,
    source: str,
    summary: Mapping[str, str] | None = None,
    force_version: int | None = None,
    term: int | None = None,
) -> CommitOutcome:
    """Replace ``hours`` of ``view``'s table with ``rows`` in one snapshot, retrying conflicts.

    ``rows`` is a table in :func:`pipelines.tables.schema.arrow_schema`, or for a batch, a
    function of the version being committed (version = highest batch version of the hours
    + 1, decided on each attempt's snapshot). The rows are written as one Parquet file per
    hour; the commit is one ``overwrite`` snapshot removing the hours' files and adding these.
    A realtime commit leaves out the hours that hold batch rows. ``force_version`` sets the
    batch version if it is above the hours' (a migration keeps the older layout's numbers).
    ``term``: a realtime commit's coordinator lease term (:class:`PublisherFenced` if a higher
    one committed); None commits unfenced (a publisher without a lease).
    """
    if source not in (BATCH, REALTIME):
        raise ValueError(f"source must be {BATCH} or {REALTIME}")
    if term is not None and source != REALTIME:
        raise ValueError("only realtime commits carry a coordinator term")
    made = rows if not callable(rows) else (lambda versions: rows(versions[0]))
    return _replace([sorted(set(hours))], view, tables, made, source, summary, force_version, term)


def replace_segments(
    tables: Tables,
    view: View,
    segments: Sequence[Sequence[int]],
    rows: Callable[[list[int]], pa.Table],
    *,
    summary: Mapping[str, str] | None = None,
) -> CommitOutcome:
    """Replace the hours of several segments with batch rows in one snapshot: each segment
    gets its own next version (highest batch version of its hours + 1), and ``rows`` makes
    every segment's rows from the list of versions. A correction of a day publishes its 24
    hours in one commit, not 24 (each commit re-reads the table's metadata)."""
    groups = [sorted(set(s)) for s in segments]
    return _replace(groups, view, tables, rows, BATCH, summary, None, None)


def _replace(
    groups: list[list[int]],
    view: View,
    tables: Tables,
    rows: Callable[[list[int]], pa.Table] | pa.Table,
    source: str,
    summary: Mapping[str, str] | None,
    force_version: int | None,
    term: int | None,
) -> CommitOutcome:
    claimed: list[tuple[Table, float]] = []
    try:
        return _attempts(groups, view, tables, rows, source, summary, force_version, term, claimed)
    finally:
        for table, _ in claimed[:1]:
            _release_turn(table)


def _attempts(
    groups: list[list[int]],
    view: View,
    tables: Tables,
    rows: Callable[[list[int]], pa.Table] | pa.Table,
    source: str,
    summary: Mapping[str, str] | None,
    force_version: int | None,
    term: int | None,
    claimed: list[tuple[Table, float]],
) -> CommitOutcome:
    wanted = sorted({h for group in groups for h in group})
    by_filter = False
    for attempt in range(1, MAX_ATTEMPTS + 1):
        table = tables.load(view)
        if source == BATCH:
            # claimed once, renewed only past half its time: a claim rewritten may look empty
            # to a publisher while it is written (the correction then loses one attempt)
            if not claimed or time.monotonic() > claimed[0][1] + BATCH_TURN_S / 2:
                _claim_turn(table)
                claimed[:] = [(table, time.monotonic())]
        elif _batch_waiting(table):
            raise TableBusyError(f"{view.name}: a correction holds the table's next commit")
        committed_term = int(table.properties.get(PUBLISHER_TERM, "0"))
        if term is not None and committed_term > term:
            raise PublisherFenced(view.name, term, committed_term)
        corrected = batch_hours(table, view, wanted)
        if source == REALTIME:
            todo = [h for h in wanted if h not in corrected]
            skipped = tuple(h for h in wanted if h in corrected)
            versions = [0] * len(groups)
        else:
            todo, skipped = wanted, ()
            versions = []
            for group in groups:
                newest = max((corrected.get(h, 0) for h in group), default=0)
                forced = force_version is not None and force_version > newest
                versions.append(force_version if forced else newest + 1)  # type: ignore[arg-type]
        version = max(versions, default=0)
        if not todo:
            return CommitOutcome(None, (), skipped, version, attempt, versions=tuple(versions))
        data = rows(versions) if callable(rows) else rows
        props = {
            f"{SUMMARY_PREFIX}source": source,
            f"{SUMMARY_PREFIX}hours": ",".join(hour_label(h) for h in todo),
            f"{SUMMARY_PREFIX}batch-version": str(version),
            **{f"{SUMMARY_PREFIX}{k}": str(v) for k, v in (summary or {}).items()},
        }
        written = _write_hour_files(table, view, data, todo, f"{source}-v{version}")
        files = [w.path for w in written.values()]
        try:
            tx = table.transaction()
            if term is not None and term > committed_term:  # in the commit's own transaction
                tx.set_properties({PUBLISHER_TERM: str(term)})
            if not by_filter:
                # the transaction's metadata, built once: each read of it applies the pending
                # updates to a deep copy
                metadata = tx.table_metadata
                with _overwrite(tx, props) as overwrite:
                    for data_file in hour_files(table, view, todo):
                        overwrite.delete_data_file(data_file)
                    for data_file in _data_files(table, metadata, list(written.values())):
                        overwrite.append_data_file(data_file)
            else:  # two snapshots (a delete, then the files), still one catalog commit
                if table.current_snapshot() is not None:
                    tx.delete(hours_filter(view, todo), snapshot_properties=props)
                if files:
                    tx.add_files(files, snapshot_properties=props, check_duplicate_files=False)
            committed = tx.commit_transaction()
        except ValidationException as exc:
            # pyiceberg's overwrite can refuse a file its own scan had planned (rarely);
            # deleting by the hours' filter does not need to find it
            _discard(table, files)
            log.warning("%s: overwrite refused (%s); committing by hour filter", view.name, exc)
            by_filter = True
            continue
        except (CommitFailedException, OperationalError) as exc:
            _discard(table, files)
            log.info(
                "%s: commit of %s conflicted (attempt %d): %s", view.name, source, attempt, exc
            )
            time.sleep(random.uniform(0.01, 0.05 * attempt))
            continue
        except BaseException:
            _discard(table, files)
            raise
        snapshot = committed.current_snapshot()
        return CommitOutcome(
            snapshot.snapshot_id if snapshot else None,
            tuple(todo),
            skipped,
            version,
            attempt,
            tuple(files),
            versions=tuple(versions),
            file_of_hour={hour: w.path for hour, w in written.items()},
        )
    raise TableConflictError(
        f"{view.name}: {MAX_ATTEMPTS} commits of {source} rows for "
        f"{', '.join(hour_label(h) for h in wanted)} met concurrent commits; nothing replaced"
    )


def _turn_path(table: Table) -> str:
    return f"{table.location().rstrip('/')}.batch-turn"


def _claim_turn(table: Table) -> None:
    """Claim the table's next commit for a correction, for :data:`BATCH_TURN_S`."""
    until = int((time.time() + BATCH_TURN_S) * 1000)
    with table.io.new_output(_turn_path(table)).create(overwrite=True) as out:
        out.write(json.dumps({"until_ms": until}).encode())


def _release_turn(table: Table) -> None:
    try:
        table.io.delete(_turn_path(table))
    except Exception:  # expires by itself
        log.debug("could not release %s", _turn_path(table), exc_info=True)


def _batch_waiting(table: Table) -> bool:
    """Whether a correction holds a live claim on the table's next commit."""
    try:
        with table.io.new_input(_turn_path(table)).open() as claim:
            until = int(json.loads(claim.read())["until_ms"])
    except FileNotFoundError:
        return False
    except (ValueError, KeyError, TypeError):  # a claim cut short: take it as none
        return False
    return until > time.time() * 1000


def _overwrite(tx: Transaction, props: dict[str, str]) -> Any:
    """An ``overwrite`` snapshot producer that drops manifests without a live file.

    pyiceberg carries every manifest that holds only DELETED entries of earlier commits into
    each new snapshot: one more manifest per commit, each read by every later commit. Java
    Iceberg and iceberg-go drop them, as this does. pyiceberg has no public way to do it in
    one snapshot (its public overwrites are a delete and an append: two snapshots), so this
    filters the producer's list of carried manifests; should a pyiceberg release rename that
    method, commits stay correct and only carry the dead manifests (logged once), and
    ``tests/pipelines/tables/test_table_commits.py`` counts a snapshot's manifests to say so.
    """
    producer = tx.update_snapshot(snapshot_properties=props).overwrite()
    carried = getattr(producer, _CARRIED, None)
    if not callable(carried):
        _warn_not_filtered()
        return producer

    def live_manifests() -> list[ManifestFile]:
        return [m for m in carried() if m.has_added_files() or m.has_existing_files()]

    setattr(producer, _CARRIED, live_manifests)
    return producer


_CARRIED = "_existing_manifests"
"""pyiceberg's overwrite producer's method listing the manifests a new snapshot keeps."""


@functools.cache
def _warn_not_filtered() -> None:
    log.warning(
        "pyiceberg's overwrite has no %s: table commits keep manifests without live files "
        "(slower commits as tables age; see pipelines/tables/commit.py)",
        _CARRIED,
    )


def hour_files(table: Table, view: View, hours: Iterable[int]) -> list[DataFile]:
    """The data files of ``hours`` in the current snapshot (every file holds one hour)."""
    hours = list(hours)
    if table.current_snapshot() is None or not hours:
        return []
    return [task.file for task in table.scan(row_filter=hours_filter(view, hours)).plan_files()]


def write_hour_files(
    table: Table, view: View, rows: pa.Table, hours: Iterable[int], prefix: str
) -> list[str]:
    """``rows`` of each of ``hours`` as one Parquet file under the table's ``data/``."""
    return [w.path for w in _write_hour_files(table, view, rows, hours, prefix).values()]


@dataclass(frozen=True)
class _Written:
    """A data file just written: its path, its Parquet footer and its size in bytes."""

    path: str
    footer: pq.FileMetaData
    size: int


def _write_hour_files(
    table: Table, view: View, rows: pa.Table, hours: Iterable[int], prefix: str
) -> dict[int, _Written]:
    """Hour -> the file written for each of ``hours`` that has rows.

    The rows are sorted by hour once and sliced (a filter per hour read the whole table once
    per hour); each file is built in memory, so its footer and size are known without
    reading it back."""
    col = partition_field(view)
    starts = rows.column(col).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_numpy()
    of_row = starts - starts % HOUR_MS
    order = np.argsort(of_row, kind="stable")
    ordered = rows.take(pa.array(order))
    sorted_hours = of_row[order]
    written = {}
    for hour in hours:
        first, last = np.searchsorted(sorted_hours, [hour, hour + HOUR_MS])
        if first == last:
            continue
        sink = pa.BufferOutputStream()
        pq.write_table(ordered.slice(first, last - first), sink, compression="zstd")
        data = sink.getvalue()
        path = (
            f"{table.location().rstrip('/')}/data/{col}_hour={hour_label(hour)}/"
            f"{prefix}-{uuid.uuid4().hex}.parquet"
        )
        with table.io.new_output(path).create(overwrite=True) as out:
            out.write(data.to_pybytes())
        written[hour] = _Written(path, pq.read_metadata(pa.BufferReader(data)), data.size)
    return written


def _data_files(table: Table, metadata: TableMetadata, written: list[_Written]) -> list[DataFile]:
    """The Iceberg entries of files just written, from their footers (pyiceberg's
    ``parquet_file_to_data_file`` reads each file back and checks its schema: done once here,
    for the first file, as every file of a commit holds slices of one table)."""
    if not written:
        return []
    schema = metadata.schema()
    first = parquet_file_to_data_file(table.io, metadata, written[0].path)
    stats_columns = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)
    files = [first]
    for file in written[1:]:
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=file.footer,
            stats_columns=stats_columns,
            parquet_column_mapping=mapping,
        )
        files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=file.path,
                file_format=FileFormat.PARQUET,
                partition=statistics.partition(metadata.spec(), schema),
                file_size_in_bytes=file.size,
                sort_order_id=None,
                spec_id=metadata.default_spec_id,
                equality_ids=None,
                key_metadata=None,
                **statistics.to_serialized_dict(),
            )
        )
    return files


def _discard(table: Table, files: list[str]) -> None:
    """Remove the files an attempt wrote and did not commit (the next attempt writes anew)."""
    for path in files:
        try:
            table.io.delete(path)
        except Exception:  # an orphan at worst; maintenance removes it
            log.debug("could not delete uncommitted %s", path, exc_info=True)
