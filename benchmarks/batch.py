"""Benchmark: the Spark correction against DuckDB on the same archived Parquet files.

    .venv/bin/python benchmarks/batch.py [--sizes 1000000,4000000] [--hours 4] [--repeat 2]

For each size it writes a synthetic archive (the generator's archive schema, 4 partitions, several files per
partition-hour, 1% duplicates, 2% late events) into a temporary directory, runs
``correct_hours`` over every hour for the shipped views, computes the same exact aggregates
with DuckDB (same dedup rule, same top-k JSON), checks that both agree and prints the
timings (the fastest of ``--repeat`` alternating runs of each engine, after one untimed
first correction in the fresh JVM), the Spark/DuckDB ratio and how each grows with the input. Spark settings come
from ``SLUICE_SPARK_*`` (default ``local[2]``). Then (unless ``--launch-events 0``) one closed
hour of the main job's stream is corrected by Dagster, from the run's launch to its success,
through the warm Spark Connect server and through spark-submit (``benchmarks/batch_launch.py``).
The temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.archive import archive_schema
from pipelines.batch import SparkSettings, build_spark, correct_hours
from pipelines.config import PROJECT_ROOT
from pipelines.generator.events import EVENT_TYPES
from pipelines.kinds.session import SESSIONS
from pipelines.kinds.windowed import WINDOWED
from pipelines.segments import HOUR_MS, archive_events_key, parse_hour_label
from pipelines.serving import query_view
from pipelines.storage import LocalObjectStore
from pipelines.tables import Tables, TablesConfig, ViewTables
from pipelines.views import WINDOW_START, View, load_views
from pipelines.views.model import (
    EVENT_COUNT,
    KEPT_DROPPED,
    KEPT_EVENTS,
    SESSION_END,
    SESSION_START,
)
from pipelines.views.topics import declaration_for, default_declarations

log = logging.getLogger("benchmarks.batch")

START_MS = parse_hour_label("2015-02-26T00")
TOPIC = "events"
PARTITIONS = 4
FILES_PER_PARTITION_HOUR = 6


# --- the synthetic archive -------------------------------------------------------------------


def _names(prefix: str, n: int, width: int = 3) -> np.ndarray:
    return np.array([f"{prefix}{i:0{width}d}" for i in range(n)], dtype=object)


def make_events(n: int, hours: int, seed: int = 11) -> pa.Table:
    """``n`` valid archived events over ``hours`` hours, vectorized; 1% are duplicates."""
    rng = np.random.default_rng(seed)
    unique = n - n // 100
    orgs, clients, sessions = 40, 50, 200
    weights = 1.0 / np.arange(1, orgs + 1) ** 1.1
    org = rng.choice(orgs, size=unique, p=weights / weights.sum())
    times = START_MS + rng.integers(0, hours * HOUR_MS, size=unique)
    late = rng.random(unique) < 0.02
    times[late] -= rng.exponential(600_000, size=int(late.sum())).astype(np.int64)
    times = np.maximum(times, START_MS)
    org_names = _names("org-", orgs)
    client_names = np.array(
        [f"{o}-client-{c:04d}" for o in org_names for c in range(clients)], dtype=object
    )
    session_names = np.array(
        [f"{o}-s-{s:05d}" for o in org_names for s in range(sessions)], dtype=object
    )
    type_p = np.array([0.55, 0.2, 0.12, 0.08, 0.05])
    ids = pc.binary_join_element_wise("e", pa.array(np.arange(unique)).cast(pa.string()), "-")
    columns = {
        "event_id": ids,
        "event_time": pa.array(times),
        "org": pa.array(org_names[org]),
        "client": pa.array(client_names[org * clients + rng.integers(0, clients, unique)]),
        "bytes_tx": pa.array(rng.lognormal(8.0, 1.5, size=unique).astype(np.int64)),
        "session_id": pa.array(session_names[org * sessions + rng.integers(0, sessions, unique)]),
        "event_type": pa.array(
            np.array(EVENT_TYPES, dtype=object)[rng.choice(5, unique, p=type_p)]
        ),
    }
    events = pa.table(columns)
    copies = events.take(pa.array(rng.integers(0, unique, size=n - unique)))
    events = pa.concat_tables([events, copies])
    partition = pc.cast(pc.index_in(events["org"], pa.array(org_names)), pa.int32())
    partition = pc.bit_wise_and(partition, pa.scalar(PARTITIONS - 1, pa.int32()))
    delay = rng.integers(0, 5000, size=events.num_rows)
    return (
        events.append_column("topic", pa.array(np.full(events.num_rows, TOPIC, dtype=object)))
        .append_column("partition", partition)
        .append_column("kafka_timestamp", pa.array(events["event_time"].to_numpy() + delay))
    )


def write_archive(root: Path, events: pa.Table) -> list[int]:
    """Split into hour x partition x file parts with consecutive offsets, as tasks would."""
    store = LocalObjectStore(root)
    times = events["event_time"].to_numpy()
    hour = times - times % HOUR_MS
    part = events["partition"].to_numpy()
    order = np.lexsort((times, hour, part))  # per partition: hour by hour, in time order
    events = events.take(pa.array(order))
    hour, part = hour[order], part[order]
    offsets = np.empty(len(order), dtype=np.int64)
    for p in range(PARTITIONS):
        mask = part == p
        offsets[mask] = np.arange(int(mask.sum()))
    schema = archive_schema(declaration_for(TOPIC, default_declarations()))
    events = events.append_column("offset", pa.array(offsets)).select(schema.names)
    events = events.cast(schema)
    keys = hour * PARTITIONS + part
    bounds = np.flatnonzero(np.diff(keys)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(keys)]])
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        for chunk in np.array_split(np.arange(start, end), FILES_PER_PARTITION_HOUR):
            if not len(chunk):
                continue
            first, last = int(chunk[0]), int(chunk[-1]) + 1
            table = events.slice(first, last - first)
            offs = table["offset"]
            key = archive_events_key(
                int(hour[first]), TOPIC, int(part[first]), offs[0].as_py(), offs[-1].as_py() + 1
            )
            path = Path(store.root) / key
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path, compression="zstd")
    return sorted({int(h) for h in np.unique(hour)})


# --- the same aggregates in DuckDB -----------------------------------------------------------


def _duck_columns(view: View) -> tuple[list[str], list[str]]:
    """Select expressions of the one-pass aggregations, and the top_k outputs to join."""
    exprs, topk = [], []
    for agg in view.aggregators:
        col = agg.spec.col_name
        if agg.where is not None and agg.name not in ("count_if",):
            raise ValueError(f"no DuckDB form for {agg.name} with its own where:")
        match agg.name:
            case "count":
                exprs.append(f"count(*) AS {agg.out}")
            case "count_if":
                exprs.append(f"count_if({agg.where.sql()}) AS {agg.out}")
            case "stddev" | "variance":
                fn = "stddev_samp" if agg.name == "stddev" else "var_samp"
                exprs.append(f"{fn}({col}::DOUBLE) AS {agg.out}")
            case "theta_distinct":  # the correction publishes the exact count
                exprs.append(f"count(DISTINCT {col}) AS {agg.out}")
            case "max_by" | "min_by":  # ties: the largest (smallest) value, as the stream
                fn = "max" if agg.name == "max_by" else "min"
                by = agg.spec.params["by"]
                exprs.append(f"{fn}(struct_pack(b := {by}, v := {col})).v AS {agg.out}")
            case "sum" | "min" | "max":
                exprs.append(f"CAST({agg.name}({col}) AS DOUBLE) AS {agg.out}")
            case "mean":
                exprs.append(f"avg({col}) AS {agg.out}")
            case "count_distinct" | "approx_count_distinct":
                exprs.append(f"count(DISTINCT {col}) AS {agg.out}")
            case "quantiles":
                exprs += [
                    f"quantile_disc({col}::DOUBLE, {q}) AS {agg.column_for(q)}"
                    for q in agg.quantiles
                ]
            case "first" | "last":
                fn = "min" if agg.name == "first" else "max"
                exprs.append(f"{fn}(struct_pack(t := event_time, v := {col})).v AS {agg.out}")
            case "top_k":
                topk.append(agg)
            case _:
                raise ValueError(f"no DuckDB form for {agg.name}")
    return exprs, topk


def duckdb_windows(con: duckdb.DuckDBPyConnection, view: View) -> pa.Table:
    """A windowed view in SQL: every window holding each event, aggregated per group."""
    keys = [WINDOW_START, *view.grouping_cols]
    exprs, topk = _duck_columns(view)
    kept = f"topic = '{view.topic}'"
    if view.filter is not None:
        kept += f" AND coalesce({view.filter.sql()}, false)"
    # every window holding the event: one for tumbling windows, interval / slide for sliding
    first = f"event_time - event_time % {view.step_ms}"
    window = (
        f"unnest(generate_series({first} - {view.reach_ms}, {first}, {view.step_ms}))"
        if view.is_sliding
        else first
    )
    rows = f"(SELECT *, {window} AS {WINDOW_START} FROM ev WHERE {kept})"
    return _aggregate(con, rows, keys, exprs, topk)


def _aggregate(
    con: duckdb.DuckDBPyConnection, rows: str, keys: list[str], exprs: list[str], topk: list
) -> pa.Table:
    """``exprs`` per group of ``keys`` over the subquery ``rows``, each top_k joined on."""
    key_list = ", ".join(keys)
    sql = f"SELECT {key_list}, {', '.join(exprs) or 'count(*) AS __n'} FROM {rows} GROUP BY ALL"
    for i, agg in enumerate(topk):
        ranked = (
            f"SELECT {key_list}, item, n, row_number() OVER (PARTITION BY {key_list} "
            f"ORDER BY n DESC, item) AS r FROM (SELECT {key_list}, "
            f"CAST({agg.spec.col_name} AS VARCHAR) AS item, count(*) AS n FROM {rows} GROUP BY ALL)"
        )
        top = (
            f"SELECT {key_list}, to_json(list({{'item': item, 'count': n}} ORDER BY r)) AS {agg.out} "
            f"FROM ({ranked}) WHERE r <= {agg.k} GROUP BY ALL"
        )
        sql = f"SELECT * FROM ({sql}) JOIN ({top}) t{i} USING ({key_list})"
    return con.sql(f"SELECT * FROM ({sql}) ORDER BY {key_list}").to_arrow_table()


def duckdb_sessions(con: duckdb.DuckDBPyConnection, view: View) -> pa.Table:
    """The session view in SQL, written apart from the Spark code: per key, in (time, id)
    order, a pause of at least ``gap`` starts a run; inside a run a session starts at its
    first event and again at the first event ``max_duration`` or more after the current
    session's start (a recursive chain of starts); each event joins the latest start before
    it (ASOF join). Every hour is read, so no session is cut by the range's edge."""
    spec = view.session
    assert spec is not None
    key = spec.key
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE runs AS
        SELECT *, sum(brk) OVER (PARTITION BY {key} ORDER BY event_time, event_id
                                 ROWS UNBOUNDED PRECEDING) AS run
        FROM (SELECT *, CASE WHEN event_time - lag(event_time) OVER (
                  PARTITION BY {key} ORDER BY event_time, event_id) >= {spec.gap_ms}
                THEN 1 ELSE 0 END AS brk
              FROM ev WHERE topic = '{view.topic}')"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE starts AS
        WITH RECURSIVE chain(k, run, s) AS (
            SELECT {key}, run, min(event_time) FROM runs GROUP BY ALL
            UNION ALL
            SELECT c.k, c.run, min(r.event_time) FROM chain c JOIN runs r
              ON r.{key} = c.k AND r.run = c.run AND r.event_time >= c.s + {spec.max_duration_ms}
            GROUP BY c.k, c.run)
        SELECT * FROM chain"""
    )
    rows = (
        f"(SELECT r.*, s.s AS {SESSION_START} FROM runs r ASOF JOIN starts s "
        f"ON r.{key} = s.k AND r.run = s.run AND r.event_time >= s.s)"
    )
    exprs, topk = _duck_columns(view)
    kept = ", ".join(f"{c} := {c}" for c in ("event_time", *spec.kept_fields))
    exprs = [
        f"count(*) AS {EVENT_COUNT}",
        f"max(event_time) AS {SESSION_END}",
        f"to_json(list(struct_pack({kept}) ORDER BY event_time, event_id)"
        f"[1:{spec.max_kept_events}]) AS {KEPT_EVENTS}",
        f"greatest(count(*) - {spec.max_kept_events}, 0) AS {KEPT_DROPPED}",
        *exprs,
    ]
    table = _aggregate(con, rows, [key, SESSION_START], exprs, topk)
    return table.sort_by([(SESSION_START, "ascending"), (key, "ascending")])


def run_duckdb(files: list[str], views: list[View]) -> dict[str, pa.Table]:
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET enable_progress_bar = false")
    payload = "event_time, org, client, bytes_tx, session_id, event_type"
    con.execute(
        f"CREATE TEMP TABLE ev AS SELECT topic, event_id, unnest(e) FROM ("
        f"SELECT topic, event_id, min(struct_pack({payload})) AS e "
        f"FROM read_parquet({files!r}) GROUP BY topic, event_id)"
    )
    out = {view.name: duckdb_view(con, view) for view in views}
    con.close()
    return out


# --- comparison and report -------------------------------------------------------------------


def _plain(value: object) -> object:
    """Timestamps as epoch ms (queries return them as datetimes, DuckDB as numbers)."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return value


def _same(x: object, y: object) -> bool:
    x, y = _plain(x), _plain(y)
    if isinstance(x, float) or isinstance(y, float):
        return x is not None and y is not None and abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1.0)
    if isinstance(y, str) and y.startswith("["):
        return json.loads(x) == json.loads(y)
    return x == y


def _window_columns(view: View) -> list[str]:
    return [WINDOW_START, *view.grouping_cols, *view.metric_columns]


def _session_columns(view: View) -> list[str]:
    assert view.session is not None
    own = [SESSION_END, EVENT_COUNT, KEPT_EVENTS, KEPT_DROPPED]
    return [view.session.key, SESSION_START, *own, *view.metric_columns]


def _window_served(row: dict, hours: list[int]) -> bool:
    """A sliding window may start before the first hour: the query does not serve it."""
    return hours[0] <= row[WINDOW_START] < hours[-1] + HOUR_MS


@dataclass(frozen=True)
class DuckKind:
    """The benchmark's own DuckDB version of one kind of view, written apart from Spark's."""

    rows: Callable[[duckdb.DuckDBPyConnection, View], pa.Table]
    compared: Callable[[View], list[str]]
    """The keys and values of a view's rows that Spark and DuckDB must agree on."""
    served: Callable[[dict, list[int]], bool]
    """Whether the query serves a DuckDB row for the hours (sessions: every hour is read)."""


DUCKDB: dict[str, DuckKind] = {
    WINDOWED.name: DuckKind(duckdb_windows, _window_columns, _window_served),
    SESSIONS.name: DuckKind(duckdb_sessions, _session_columns, lambda row, hours: True),
}
"""Each kind's DuckDB version, by the kind's name."""


def duckdb_view(con: duckdb.DuckDBPyConnection, view: View) -> pa.Table:
    return DUCKDB[view.kind].rows(con, view)


def compared_columns(view: View) -> list[str]:
    """The keys and values of a view's rows that Spark and DuckDB must agree on."""
    return DUCKDB[view.kind].compared(view)


def agree(
    store: LocalObjectStore, tables: Tables, views: list[View], hours: list[int], duck: dict
) -> bool:
    """Spark's published values equal DuckDB's (floats to 1e-9 relative), row by row."""
    ok = True
    for view in views:
        spark_rows = query_view(
            store, view, hours[0], hours[-1] + HOUR_MS, tables=tables
        ).to_pylist()
        served = DUCKDB[view.kind].served
        duck_rows = [r for r in duck[view.name].to_pylist() if served(r, hours)]
        if len(spark_rows) != len(duck_rows):
            log.error(
                "%s: %d rows in Spark, %d in DuckDB", view.name, len(spark_rows), len(duck_rows)
            )
            ok = False
            continue
        for a, b in zip(spark_rows, duck_rows, strict=True):
            wrong = [c for c in compared_columns(view) if not _same(a[c], b[c])]
            if wrong:
                c = wrong[0]
                log.error("%s row %s: %s Spark %r, DuckDB %r", view.name, b, c, a[c], b[c])
                ok = False
                break
    return ok


def _cpu_s(spark) -> float:
    """CPU seconds of this process plus Spark's JVM: on a shared machine, steadier than wall time."""
    total = time.process_time()
    try:
        pid = spark.sparkContext._gateway.proc.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError):
        pass
    return total


class Timer:
    def __init__(self, spark) -> None:
        self.spark = spark

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), _cpu_s(self.spark)
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = _cpu_s(self.spark) - self.cpu

    def __str__(self) -> str:
        return f"{self.wall:.1f} s wall, {self.cpu:.1f} s CPU"


@dataclass
class SizeResult:
    """One input size: the fastest run of each engine and whether their values agreed."""

    events: int
    spark: Timer
    duckdb: Timer
    agree: bool
    published: int


def compare(
    spark,
    workdir: Path,
    sizes: list[int],
    hours: int,
    repeat: int,
    views: list[View],
    *,
    first_run: bool = True,
) -> list[SizeResult]:
    """Spark against DuckDB on a synthetic archive of each size, printed as it goes;
    ``first_run`` times an untimed-for-comparison first correction in the fresh JVM."""
    out = []
    for i, n in enumerate(sizes):
        root = workdir / f"n{n}"
        started = time.perf_counter()
        events = make_events(n, hours)
        archived = write_archive(root, events)
        del events
        store = LocalObjectStore(root)
        tables = ViewTables(TablesConfig(str(root), catalog_url=f"sqlite:///{root}/catalog.db"))
        files = [str(p) for p in sorted((root / "archive" / "events").rglob("*.parquet"))]
        size_mb = sum(Path(f).stat().st_size for f in files) / 1e6
        print(
            f"\n{n:,} events: {len(files)} files, {size_mb:.0f} MB, {len(archived)} hours "
            f"(written in {time.perf_counter() - started:.1f} s)"
        )
        if i == 0 and first_run:
            # The first job of a JVM pays for class loading and JIT: report it apart.
            with Timer(spark) as first:
                correct_hours(spark, store, views, archived, tables=tables)
            print(f"  Spark, first job in a fresh JVM: {first}")
        spark_runs, duck_runs = [], []
        for _ in range(repeat):
            # Alternate, so a burst of load on a shared machine hits both engines.
            with Timer(spark) as spark_t:
                results = correct_hours(spark, store, views, archived, tables=tables)
            with Timer(spark) as duck_t:
                duck = run_duckdb(files, views)
            spark_runs.append(spark_t)
            duck_runs.append(duck_t)
        spark_t = min(spark_runs, key=lambda t: t.wall)
        duck_t = min(duck_runs, key=lambda t: t.wall)
        same = agree(store, tables, views, archived, duck)
        published = sum(not r.skipped for r in results)
        print(
            f"  Spark correction: {spark_t} ({published} segments published); "
            f"runs: {', '.join(f'{t.wall:.1f}' for t in spark_runs)} s wall"
        )
        print(
            f"  DuckDB, same aggregates: {duck_t}; runs: "
            f"{', '.join(f'{t.wall:.1f}' for t in duck_runs)} s wall; "
            f"results agree: {'yes' if same else 'NO'}"
        )
        print(
            f"  Spark / DuckDB: {spark_t.wall / duck_t.wall:.1f}x wall, "
            f"{spark_t.cpu / duck_t.cpu:.1f}x CPU; load average {os.getloadavg()[0]:.1f}"
        )
        out.append(SizeResult(n, spark_t, duck_t, same, published))
        shutil.rmtree(root)
    if len(out) > 1:
        a, b = out[0], out[-1]
        print(
            f"\n{a.events:,} -> {b.events:,} events ({b.events / a.events:.0f}x): Spark "
            f"{b.spark.wall / a.spark.wall:.2f}x wall ({b.spark.cpu / a.spark.cpu:.2f}x CPU), "
            f"DuckDB {b.duckdb.wall / a.duckdb.wall:.2f}x wall "
            f"({b.duckdb.cpu / a.duckdb.cpu:.2f}x CPU)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000000,4000000", help="events per run, comma-separated"
    )
    parser.add_argument("--hours", type=int, default=4, help="hours of event time per run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="timed runs of each engine per size; the fastest is reported (the JIT of a "
        "warm JVM still settles over the first runs of a new input size)",
    )
    parser.add_argument("--views", default=str(PROJECT_ROOT / "data" / "views.yaml"))
    parser.add_argument(
        "--launch-events",
        type=int,
        default=12000,
        help="then one closed hour of the main job's stream through Dagster, warm server vs "
        "spark-submit (benchmarks/batch_launch.py); 0 skips it",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sizes = [int(s) for s in args.sizes.split(",")]
    views = load_views(args.views)
    settings = SparkSettings()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    )
    print(
        f"views: {', '.join(v.name for v in views)}; Spark master {settings.master}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    try:
        started, cpu = time.perf_counter(), time.process_time()
        spark = build_spark(settings)
        print(
            f"Spark session start: {time.perf_counter() - started:.1f} s wall, "
            f"{_cpu_s(spark) - cpu:.1f} s CPU"
        )
        results = compare(spark, workdir, sizes, args.hours, args.repeat, views)
        spark.stop()
        if args.launch_events:
            from batch_launch import measure

            measure(workdir / "launch", args.launch_events, args.repeat)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(r.agree for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
