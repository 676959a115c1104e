"""Why realtime differs from the correction, counted from the raw archive.

The stream counts every delivery of an event and drops events whose window had closed when
they came (window end + allowed lateness <= the task's watermark); the correction counts
each event once and keeps late events. An event is one id of the topic's declared ``id``
(a delivery of an id already delivered is a duplicate; a null id identifies nothing, so its
event is never one); a topic without an id has no duplicates: every archived record counts
on both sides. Replaying the watermark over the archive, offset by offset per partition,
tells for each window and group how many deliveries, distinct events and late drops it had,
so a reconciliation can say which differences those explain.

The watermark before an event is the largest event time at an earlier offset of its
partition. Only events at or after the hour can make an event of the hour late, so the
archive is read from the hour on: the hour's files, plus the files of later hours whose
offset ranges start before the hour's last offset (events that came early), up to
``LOOKAHEAD_HOURS`` later. Pure data-plane reading, no Dagster.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.aggregators import Aggregator, Reconciled
from pipelines.events.declaration import EVENT_TIME
from pipelines.expressions.derived import stored_columns
from pipelines.segments import (
    HOUR_MS,
    RangeRecord,
    archive_events_key,
    parse_range_name,
    read_parquet,
    read_range_records,
)
from pipelines.storage import ObjectStore
from pipelines.views.model import View

__all__ = [
    "LOOKAHEAD_HOURS",
    "ArchiveReader",
    "Causes",
    "GroupCauses",
    "HourArchive",
    "archive_columns",
    "id_column",
    "read_hour_archive",
    "view_causes",
    "window_values",
]

log = logging.getLogger(__name__)

LOOKAHEAD_HOURS = 24
"""How many later hours are searched for early events that raised the watermark."""


@dataclass(frozen=True)
class Causes:
    """Counted from the archive for a view's windows of one hour."""

    events: int = 0
    """Valid events archived (every delivery)."""
    duplicates: int = 0
    """Deliveries of an id already delivered: the stream counts them, batch does not."""
    late_dropped: int = 0
    """Events the stream dropped because their window had closed (beyond allowed lateness)."""
    dead_letters: int = 0
    """Dead letters in the offset ranges that carried the hour: counted by neither side."""
    dead_letter_fields: tuple[tuple[str, int], ...] = ()
    """Of those, per declared field (sorted): the ones dead-lettered for that field's value
    (missing_field, wrong_type, out_of_range). Dead letters of files written before the
    archive kept the field are in :attr:`dead_letters` only."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "duplicates": self.duplicates,
            "late_dropped": self.late_dropped,
            "dead_letters": self.dead_letters,
            "dead_letter_fields": dict(self.dead_letter_fields),
        }

    def __add__(self, other: Causes) -> Causes:
        fields = dict(self.dead_letter_fields)
        for name, n in other.dead_letter_fields:
            fields[name] = fields.get(name, 0) + n
        return Causes(
            self.events + other.events,
            self.duplicates + other.duplicates,
            self.late_dropped + other.late_dropped,
            self.dead_letters + other.dead_letters,
            tuple(sorted(fields.items())),
        )


@dataclass(frozen=True)
class GroupCauses:
    """One window and group: deliveries, distinct events, and late drops."""

    deliveries: int
    distinct: int
    late: int

    @property
    def duplicates(self) -> int:
        return self.deliveries - self.distinct

    @property
    def stream_count_offset(self) -> int:
        """What the stream's count should exceed the exact count by: duplicates - late."""
        return self.deliveries - self.late - self.distinct

    @property
    def explains_difference(self) -> bool:
        return self.duplicates > 0 or self.late > 0


@dataclass(frozen=True)
class HourArchive:
    """The archive rows that decide one hour's causes, with the watermark before each row."""

    topic: str
    hour_ms: int
    rows: pa.Table
    """The id (if declared), event_time, partition, offset, prior_watermark and the columns
    read (grouping, filters)."""
    dead_letters: int
    id_col: str | None = None
    """The topic's declared id column: what tells two deliveries of one event (None: none
    does, every delivery is an event of its own)."""
    dead_letter_fields: tuple[tuple[str, int], ...] = ()
    """The hour's dead letters per declared field whose value did not fit (see
    :attr:`Causes.dead_letter_fields`)."""

    def causes(self) -> Causes:
        """Its dead letters as causes (the events' are counted per view)."""
        return Causes(dead_letters=self.dead_letters, dead_letter_fields=self.dead_letter_fields)


def _hour_files(reader: ArchiveReader, hour_ms: int, topic: str) -> list[tuple[str, int, int, int]]:
    """(key, partition, first, end) of the topic's events files of one hour."""
    prefix = archive_events_key(hour_ms, topic, 0, 0, 0).rpartition("/")[0] + "/"
    files = []
    for key in reader.list(prefix):
        parsed = parse_range_name(key)
        if parsed is not None and parsed[0] == topic:
            files.append((key, *parsed[1:4]))
    return files


class ArchiveReader:
    """Reads archive files once per reconciliation run: neighbouring hours share files."""

    HOURS_KEPT = 8
    """Hours' archives kept for reuse: a session view's hour reads the hours its sessions
    span (up to gap + max duration after it), and the next hour reads most of them again."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._tables: dict[tuple[str, tuple[str, ...]], pa.Table | None] = {}
        self._listings: dict[str, list[str]] = {}
        self.hours: OrderedDict[tuple, HourArchive] = OrderedDict()
        """The newest hours read, by (topic, hour, columns, id)."""

    def list(self, prefix: str) -> list[str]:
        if prefix not in self._listings:
            self._listings[prefix] = self.store.list(prefix)
        return self._listings[prefix]

    def read(self, key: str, columns: Sequence[str]) -> pa.Table | None:
        cache_key = (key, tuple(columns))
        if cache_key not in self._tables:
            try:
                data = self.store.get(key)
            except FileNotFoundError:
                log.warning("archive file %s vanished while reading (a task discarded it)", key)
                self._tables[cache_key] = None
            else:
                self._tables[cache_key] = _read_columns(data, columns)
        return self._tables[cache_key]


def _read_columns(data: bytes, columns: Sequence[str]) -> pa.Table:
    """``columns`` of a Parquet file; one the file lacks (declared after it was written) is
    null in every row, as the archive's other readers read it."""
    present = set(pq.read_schema(io.BytesIO(data)).names)
    table = read_parquet(data, [c for c in columns if c in present])
    for name in columns:
        if name not in present:
            table = table.append_column(name, pa.nulls(table.num_rows))
    return table.select(list(columns))


_PRIOR_WATERMARK = """
    SELECT *, max(event_time) OVER (
        PARTITION BY "partition" ORDER BY "offset"
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS prior_watermark
    FROM archive
"""

# A dead letter belongs to the hour the partition's watermark was in when it came.
_DEAD_LETTERS_OF_HOUR = """
    WITH marks AS (
        SELECT "partition", "offset", event_time, false AS letter, NULL AS field FROM archive
        UNION ALL
        SELECT "partition", "offset", NULL, true, field FROM letters
    ), watermarked AS (
        SELECT letter, field, max(event_time) OVER (
            PARTITION BY "partition" ORDER BY "offset"
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS watermark
        FROM marks
    )
    SELECT field, count(*) FROM watermarked
    WHERE letter AND watermark >= $hour AND watermark < $hour + $hour_ms
    GROUP BY field ORDER BY field
"""


def _dead_letter_files(
    ranges: Sequence[RangeRecord],
    files: Sequence[tuple[str, int, int, int]],
    last_end: dict[int, int],
) -> list[str]:
    """The dead-letter files of the range records within the offsets the hour's files span."""
    first: dict[int, int] = {}
    for _, partition, start, _ in files:
        first[partition] = min(first.get(partition, start), start)
    keys = []
    for record in ranges:
        lo, hi = first.get(record.partition), last_end.get(record.partition)
        if lo is None or hi is None or record.end <= lo or record.first >= hi:
            continue
        keys.extend(k for k in record.files if k.startswith("archive/dead_letters/"))
    return keys


_LETTER_COLUMNS = ["partition", "offset", "field"]


def _dead_letter_offsets(reader: ArchiveReader, keys: Sequence[str]) -> tuple[pa.Table, bool]:
    """(partition, offset, field) of the dead letters in ``keys`` (the field null in files
    written before the archive kept it), and whether every file was read."""
    parts = [t for key in keys if (t := reader.read(key, _LETTER_COLUMNS)) is not None]
    read = len(parts) == len(keys)
    parts = [t.set_column(2, "field", t.column("field").cast(pa.string())) for t in parts]
    if not parts:
        empty = {
            "partition": pa.array([], pa.int32()),
            "offset": pa.array([], pa.int64()),
            "field": pa.array([], pa.string()),
        }
        return pa.table(empty), read
    return pa.concat_tables(parts), read


def id_column(views: Sequence[View]) -> str | None:
    """The declared id of ``views``' topic (one topic, one declaration): None without one."""
    ids = {v.declaration.id for v in views if v.declaration is not None}
    if len(ids) > 1:
        raise ValueError(f"views of one topic declare different ids: {sorted(map(str, ids))}")
    return next(iter(ids), None)


def archive_columns(views: Sequence[View]) -> list[str]:
    """The event columns the causes of ``views`` read beside the archive's own and the id:
    their grouping columns and the fields of their ``where:`` filters."""
    columns = {c for v in views for c in v.grouping_cols}
    columns |= {f for v in views if v.filter is not None for f in v.filter.fields}
    columns |= {  # quantiles are judged by rank among the window's own values
        c
        for v in views
        for a in v.aggregators
        if a.description.reconciled is Reconciled.QUANTILE_RANK
        for c in a.columns_read()
    }
    for view in views:  # derived columns are computed from the archived ones (_with_derived)
        if view.declaration is not None:
            columns = stored_columns(view.declaration.derived_columns(), columns)
    return sorted(columns - {id_column(views), EVENT_TIME})


def _with_derived(view: View, rows: pa.Table) -> str:
    """The archive rows as a DuckDB relation with the topic's derived columns that ``rows``
    hold the inputs of (the same parsed expressions the stream and Spark compute)."""
    relation, available = "archive", set(rows.column_names)
    derived = () if view.declaration is None else view.declaration.derived_columns()
    for column in derived:
        if column.columns <= available:
            name = f'{column.sql()} AS "{column.name}"'
            chosen = f"* REPLACE ({name})" if column.name in available else f"*, {name}"
            relation = f"(SELECT {chosen} FROM {relation})"
            available.add(column.name)
    return relation


SHARED_ROWS = 4_000_000
"""Archive rows kept across passes in one process (a run's check steps, one view each, read
the same hours): a few hundred MB of the example views' columns."""

_shared: OrderedDict[tuple, HourArchive] = OrderedDict()
_shared_lock = threading.Lock()


def _shared_get(key: tuple) -> HourArchive | None:
    with _shared_lock:
        found = _shared.get(key)
        if found is not None:
            _shared.move_to_end(key)
        return found


def _shared_put(key: tuple, hour: HourArchive) -> None:
    with _shared_lock:
        _shared[key] = hour
        rows = sum(h.rows.num_rows for h in _shared.values())
        while rows > SHARED_ROWS and len(_shared) > 1:
            rows -= _shared.popitem(last=False)[1].rows.num_rows


def read_hour_archive(
    store: ObjectStore | ArchiveReader,
    topic: str,
    hour_ms: int,
    grouping_cols: Sequence[str],
    ranges: Sequence[RangeRecord] | None = None,
    id_col: str | None = None,
) -> HourArchive:
    """The rows of ``hour_ms`` and the early rows that can raise its watermark.

    ``grouping_cols``: the event columns to read (:func:`archive_columns`); ``id_col``: the
    topic's declared id (:func:`id_column`), read too. ``ranges`` are the topic's range
    records (read once by a caller covering many hours);
    pass an :class:`ArchiveReader` as ``store`` to share file reads between hours. An hour
    read from the same files by an earlier pass of this process is not read again (the
    files are immutable: their names are their offset ranges).
    """
    reader = store if isinstance(store, ArchiveReader) else ArchiveReader(store)
    own = [*([id_col] if id_col is not None else []), EVENT_TIME, "partition", "offset"]
    columns = [*own, *sorted(set(grouping_cols) - set(own))]
    cache_key = (topic, hour_ms, tuple(columns), id_col)
    if cache_key in reader.hours:
        reader.hours.move_to_end(cache_key)
        return reader.hours[cache_key]
    files, last_end = _archive_files(reader, topic, hour_ms)
    if ranges is None:
        ranges = read_range_records(reader.store, topic)
    letters = _dead_letter_files(ranges, files, last_end)
    shared_key = (reader.store.root, *cache_key, tuple(files), tuple(letters))
    found = _shared_get(shared_key)
    if found is None:
        found, complete = _read_hour_archive(
            reader, topic, hour_ms, columns, files, letters, id_col
        )
        if complete:  # a file that vanished while read leaves this pass's hour short
            _shared_put(shared_key, found)
    reader.hours[cache_key] = found
    while len(reader.hours) > reader.HOURS_KEPT:
        reader.hours.popitem(last=False)
    return found


def _archive_files(
    reader: ArchiveReader, topic: str, hour_ms: int
) -> tuple[list[tuple[str, int, int, int]], dict[int, int]]:
    """The hour's files and those of later hours that came early, and per partition the end
    of the hour's offsets."""
    files = _hour_files(reader, hour_ms, topic)
    last_end: dict[int, int] = {}
    for _, partition, _, end in files:
        last_end[partition] = max(last_end.get(partition, 0), end)
    for later in range(1, LOOKAHEAD_HOURS + 1):
        for key, partition, first, end in _hour_files(reader, hour_ms + later * HOUR_MS, topic):
            if first < last_end.get(partition, -1):
                files.append((key, partition, first, end))
    return files, last_end


def _read_hour_archive(
    reader: ArchiveReader,
    topic: str,
    hour_ms: int,
    columns: list[str],
    files: Sequence[tuple[str, int, int, int]],
    letter_files: Sequence[str],
    id_col: str | None,
) -> tuple[HourArchive, bool]:
    """The hour's rows watermarked, and whether every file could be read."""
    tables = [t for key, *_ in files if (t := reader.read(key, columns)) is not None]
    if tables:
        rows = pa.concat_tables(tables, promote_options="permissive")  # nulls of older files
    else:
        rows = pa.table({c: pa.array([], pa.int64()) for c in columns})
    letters, letters_read = _dead_letter_offsets(reader, letter_files)
    complete = len(tables) == len(files) and letters_read
    con = _connect()
    try:
        con.register("archive", rows)
        with_watermark = con.sql(_PRIOR_WATERMARK).to_arrow_table()
        con.register("letters", letters)
        per_field = con.execute(
            _DEAD_LETTERS_OF_HOUR, {"hour": hour_ms, "hour_ms": HOUR_MS}
        ).fetchall()
    finally:
        con.unregister("archive")
        con.unregister("letters")
    dead = sum(int(n) for _, n in per_field)
    fields = tuple((name, int(n)) for name, n in per_field if name is not None)
    return HourArchive(topic, hour_ms, with_watermark, dead, id_col, fields), complete


_local = threading.local()


def _connect() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB connection: opening one costs more than the hour's query."""
    con = getattr(_local, "con", None)
    if con is None:
        # The tables are small (an hour of one topic); threads cost more than they save.
        con = _local.con = duckdb.connect(config={"threads": 1})
    return con


def _distinct(id_col: str | None, where: str = "") -> str:
    """SQL counting the distinct events among a group's deliveries (``where``: of those that
    pass it): its distinct ids, and each delivery whose id is null; without an id, every
    delivery."""
    also = f" AND {where}" if where else ""
    if id_col is None:
        return f"count(*) FILTER (WHERE {where})" if where else "count(*)"
    own = f" FILTER (WHERE {where})" if where else ""
    return f'count(DISTINCT "{id_col}"){own} + count(*) FILTER (WHERE "{id_col}" IS NULL{also})'


def _once_per_id(id_col: str | None) -> str:
    """A QUALIFY keeping one delivery per id (every delivery without an id, or a null one)."""
    if id_col is None:
        return ""
    first = f'row_number() OVER (PARTITION BY "{id_col}" ORDER BY "offset") = 1'
    return f'QUALIFY "{id_col}" IS NULL OR {first}'


def _window_key(window_start_ms: int) -> str:
    return datetime.fromtimestamp(window_start_ms / 1000, tz=UTC).isoformat()


def _with_following(archive: HourArchive, view: View, following: HourArchive | None) -> pa.Table:
    """The hour's rows, and for a sliding view the next hour's (its windows reach them); an
    empty read (typed int64 throughout) is left out rather than merged."""
    parts = [archive.rows]
    if following is not None and view.is_sliding:
        parts.append(following.rows)
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return archive.rows
    if len(parts) == 1:
        return parts[0]
    following_rows = parts[1].select(parts[0].column_names)
    return pa.concat_tables([parts[0], following_rows], promote_options="permissive")


def view_causes(
    archive: HourArchive, view: View, following: HourArchive | None = None
) -> tuple[Causes, dict[tuple, GroupCauses]]:
    """Causes for ``view``'s windows starting in the archive's hour, in total and per key.

    Keys are ``(window_start ISO string, *group values)`` as :func:`quality.compare.rows_by_key`
    makes them, so they line up with the compared rows. Only events the view's ``where:``
    keeps count. A sliding window belongs to every window holding it, and is late when the
    first of them had closed (its pane's end + lateness, as the stream decides); windows
    reaching into the next hour need its archive, ``following``.
    """
    rows = _with_following(archive, view, following)
    if rows.num_rows == 0:
        return archive.causes(), {}
    groups = ", ".join(f'"{c}"' for c in view.grouping_cols)
    select_groups = f", {groups}" if groups else ""
    relation = _with_derived(view, rows)
    where = f"WHERE {view.filter.sql()}" if view.filter is not None else ""
    con = _connect()
    try:
        con.register("archive", rows)
        result = con.execute(
            f"""
            WITH once AS (  -- a row both hours' reads hold counts once
                SELECT * FROM {relation}
                QUALIFY row_number() OVER (
                    PARTITION BY "partition", "offset" ORDER BY prior_watermark DESC NULLS LAST
                ) = 1
            ), panes AS (
                SELECT *, event_time - event_time % $step AS pane FROM once {where}
            ), windowed AS (
                SELECT *, unnest(range(pane - $reach, pane + 1, $step)) AS window_start
                FROM panes
            )
            SELECT window_start{select_groups},
                   count(*) AS deliveries,
                   {_distinct(archive.id_col)} AS distinct_events,
                   count(*) FILTER (
                       WHERE pane + $step + $lateness <= prior_watermark
                   ) AS late,
                   -- the hour's totals count each event once: in its last window (its own
                   -- hour's, as a tumbling window is)
                   count(*) FILTER (WHERE window_start = pane) AS own_deliveries,
                   {_distinct(archive.id_col, "window_start = pane")} AS own_distinct,
                   count(*) FILTER (
                       WHERE window_start = pane AND pane + $step + $lateness <= prior_watermark
                   ) AS own_late
            FROM windowed
            WHERE window_start >= $hour AND window_start < $hour + {HOUR_MS}
            GROUP BY ALL
            """,
            {
                "step": view.step_ms,
                "reach": view.reach_ms,
                "lateness": view.allowed_lateness_ms,
                "hour": archive.hour_ms,
            },
        ).fetchall()
    finally:
        con.unregister("archive")
    per_key: dict[tuple, GroupCauses] = {}
    total = archive.causes()
    for row in result:
        window, *group, deliveries, distinct, late, own, own_distinct, own_late = row
        causes = GroupCauses(int(deliveries), int(distinct), int(late))
        per_key[(_window_key(int(window)), *group)] = causes
        total = total + Causes(own, own - own_distinct, own_late, 0)
    return total, per_key


def window_values(
    archive: HourArchive, view: View, agg: Aggregator, following: HourArchive | None = None
) -> dict[tuple, list[float]]:
    """Per window and group (keys as :func:`view_causes`'), the sorted values of ``agg``'s
    column over the window's distinct events that its view's and its own ``where:`` keep:
    what an exact quantile is taken from."""
    rows = _with_following(archive, view, following)
    if rows.num_rows == 0:
        return {}
    groups = "".join(f', "{c}"' for c in view.grouping_cols)
    filters = [f.sql() for f in (view.filter, agg.where) if f is not None]
    relation = _with_derived(view, rows)
    where = f"WHERE {' AND '.join(filters)}" if filters else ""
    column = agg.spec.col_name
    con = _connect()
    try:
        con.register("archive", rows)
        result = con.execute(
            f"""
            WITH read_once AS (  -- a row both hours' reads hold counts once
                SELECT * FROM {relation}
                QUALIFY row_number() OVER (PARTITION BY "partition", "offset") = 1
            ), once AS (
                SELECT * FROM read_once {_once_per_id(archive.id_col)}
            ), panes AS (
                SELECT *, event_time - event_time % $step AS pane FROM once {where}
            ), windowed AS (
                SELECT *, unnest(range(pane - $reach, pane + 1, $step)) AS window_start
                FROM panes
            )
            SELECT window_start{groups}, list(CAST("{column}" AS DOUBLE) ORDER BY "{column}")
            FROM windowed
            WHERE window_start >= $hour AND window_start < $hour + {HOUR_MS}
            GROUP BY ALL
            """,
            {"step": view.step_ms, "reach": view.reach_ms, "hour": archive.hour_ms},
        ).fetchall()
    finally:
        con.unregister("archive")
    return {(_window_key(int(w)), *group): values for w, *group, values in result}
