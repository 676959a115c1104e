"""Nulls, SQL's rules, in the stream: every aggregation over random events with nulls in every
nullable column (long, double, string, boolean, timestamp) gives what SQL does, computed in
plain Python (:func:`tests.fixtures.nulls.reference`), through batches, a checkpoint and
merges; DuckDB's SQL over the same rows agrees (nulls identical)."""

from __future__ import annotations

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pytest

from pipelines.aggregators import AggregationSpec, build
from pipelines.segments import state_column
from pipelines.stream.state import WindowState
from pipelines.views import parse_views
from tests.fixtures.nulls import (
    AGGREGATIONS,
    COLUMNS,
    HOUR,
    T0,
    WHERES,
    batch_of,
    group_label,
    random_rows,
    reference,
    same,
    view_document,
)


def _groups(rows: list[dict], grouping: tuple[str, ...]) -> dict[tuple, list[dict]]:
    found: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (
            row["event_time"] - row["event_time"] % HOUR,
            *(group_label(row[c]) for c in grouping),
        )
        found.setdefault(key, []).append(row)
    return found


def _stream(view, rows: list[dict]) -> dict[tuple, dict]:
    """Results as a task writes them: three batches, every state through a checkpoint."""
    state = WindowState(view)
    for part in np.array_split(np.arange(len(rows)), 3):
        state.update(batch_of([rows[i] for i in part]))
    restored = WindowState(view)
    restored.load(state.all_table())
    results = {}
    for bucket in restored.buckets.values():
        for key, states in bucket.items():
            row: dict = {}
            for agg, s in zip(view.aggregators, states, strict=True):
                row.update(agg.result(s))
            results[key] = row
    return results


@pytest.mark.parametrize("grouping", [("shop",), ("refunded", "tier")])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_stream_gives_what_sql_gives_over_nulls(seed: int, grouping: tuple) -> None:
    (view,) = parse_views(view_document(grouping=grouping))
    rows = random_rows(seed, 900)
    got = _stream(view, rows)
    groups = _groups(rows, grouping)
    assert set(got) == set(groups)
    assert any(None in key for key in groups), "a null grouping value is a group"
    for key, members in groups.items():
        for i, (case, agg) in enumerate(zip(AGGREGATIONS, view.aggregators, strict=True)):
            want = reference(case, members, f"a{i}")
            assert set(want) == {f.name for f in agg.output_fields()}, case
            for column, value in want.items():
                assert same(case, value, got[key][column]), (key, case, value, got[key][column])


def test_a_views_where_is_unknown_on_a_null_and_drops_the_event() -> None:
    """A view's own filter over nullable columns keeps what SQL's WHERE keeps (a long's
    null is not the 0 the batch holds under its mask)."""
    where = "card = 'c1' or cents < 100"
    (view,) = parse_views(view_document(keep=where))
    rows = random_rows(9, 900)
    kept = [r for r in rows if WHERES[where](r)]
    assert any(r["cents"] is None for r in rows) and len(kept) < len(rows)
    got = _stream(view, rows)
    groups = _groups(kept, ("shop",))
    assert set(got) == set(groups)
    for key, members in groups.items():
        for i, case in enumerate(AGGREGATIONS):
            for column, value in reference(case, members, f"a{i}").items():
                assert same(case, value, got[key][column]), (key, case, value, got[key][column])


def test_sum_if_count_if_and_sum_over_no_value() -> None:
    """sum_if with no event its where: keeps is null (SQL's sum), count_if 0; a sum over
    a column null in every event is null too."""
    (view,) = parse_views(view_document())
    rows = [r for r in random_rows(3, 300) if r["shop"] == "s3"]  # s3: amount always null
    got = _stream(view, rows)

    def out(case: tuple) -> str:
        return f"a{AGGREGATIONS.index(case)}"

    assert got
    for row in got.values():
        assert row[out(("count_if", None, {}, "amount > 50"))] == 0
        assert row[out(("sum_if", "cents", {}, "amount > 99.5"))] is None
        assert row[out(("sum", "amount", {}, None))] is None
        assert row[out(("mean", "amount", {}, None))] is None


def test_validation_fills_each_columns_kind_and_the_types_of_results() -> None:
    """A long's sum, min and max are exact integers; a boolean's min a boolean; a
    timestamp's max epoch ms (an integer); a double's last a double."""
    (view,) = parse_views(view_document())
    types = {
        (a.aggregation, a.col_name): agg.output_fields()[0].type
        for a, agg in zip(view.aggregations, view.aggregators, strict=True)
    }
    assert types[("sum", "cents")] == pa.int64()
    assert types[("sum", "amount")] == pa.float64()
    assert types[("min", "cents")] == pa.int64()
    assert types[("min", "refunded")] == pa.bool_()
    assert types[("max", "paid_at")] == pa.int64()
    assert types[("last", "amount")] == pa.float64()
    assert types[("min", "card")] == pa.string()


def _duckdb_expression(case: tuple, out: str) -> list[tuple[str, str]]:
    """(output column, DuckDB SQL) of one case: SQL's own aggregates, each over the rows its
    where: keeps and its inputs are not null in (explicit where SQL's aggregate would not
    skip them: a pair picked by arg_max)."""
    agg, col, params, where = case
    inputs = [col, *(params[p] for p in ("by", "denominator") if p in params)]
    tests = [] if where is None else [f"({where})"]
    tests += [f'"{c}" IS NOT NULL' for c in inputs if c is not None]
    kept = f" FILTER (WHERE {' AND '.join(tests)})" if tests else ""
    c = f'"{col}"'
    simple = {
        "sum": "sum",
        "sum_if": "sum",
        "mean": "avg",
        "min": "min",
        "max": "max",
        "any_value": "min",
        "variance": "var_samp",
        "stddev": "stddev_samp",
    }
    if agg == "count":
        return [(out, "count(*)")]
    if agg == "count_if":
        return [(out, f"count(*){kept}")]
    if agg in simple:
        return [(out, f"{simple[agg]}({c}){kept}")]
    if agg == "ratio":
        d = f'"{params["denominator"]}"'
        return [(out, f"sum({c}){kept} / nullif(sum({d}){kept}, 0)")]
    if agg in ("count_distinct", "approx_count_distinct", "theta_distinct"):
        return [(out, f"count(DISTINCT {c}){kept}")]
    if agg == "quantiles":
        return [
            (f"{out}_p{q * 100:g}".replace(".", "_"), f"quantile_disc({c}, {q}){kept}")
            for q in params["quantiles"]
        ]
    if agg == "cdf":
        return [
            (f"{out}_le_{p:g}", f"avg(CASE WHEN {c} <= {p} THEN 1.0 ELSE 0.0 END){kept}")
            for p in params["split_points"]
        ]
    if agg in ("first", "last"):
        pick = "arg_min" if agg == "first" else "arg_max"
        return [(out, f"{pick}({c}, row(event_time, {c})){kept}")]
    if agg in ("max_by", "min_by"):
        pick = "arg_max" if agg == "max_by" else "arg_min"
        return [(out, f'{pick}({c}, row("{params["by"]}", {c})){kept}')]
    return []  # histogram, top_k, frequent_items, mode: no one SQL aggregate


def test_duckdb_gives_what_the_stream_gives_over_nulls() -> None:
    (view,) = parse_views(view_document())
    rows = random_rows(5, 900)
    got = _stream(view, rows)
    types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64()}
    types |= {"boolean": pa.bool_(), "timestamp": pa.int64()}
    schema = pa.schema([("event_time", pa.int64())] + [(n, types[k]) for n, k in COLUMNS.items()])
    events = pa.Table.from_pylist(rows, schema=schema)  # noqa: F841  (read by DuckDB)
    selected = [
        (column, sql)
        for i, case in enumerate(AGGREGATIONS)
        for column, sql in _duckdb_expression(case, f"a{i}")
    ]
    assert len({c for c, _ in selected}) >= 25, "most families are checked in DuckDB"
    query = (
        f"SELECT event_time - event_time % {HOUR} AS w, shop, "
        + ", ".join(f'{sql} AS "{column}"' for column, sql in selected)
        + " FROM events GROUP BY ALL"
    )
    with duckdb.connect() as db:
        cursor = db.execute(query)
        names = [d[0] for d in cursor.description]
        result = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    assert {(r["w"], r["shop"]) for r in result} == set(got)
    for row in result:
        key = (row["w"], row["shop"])
        for column, _ in selected:
            value = row[column]
            case = AGGREGATIONS[int(column[1:].split("_")[0])]
            assert same(case, value, got[key][column]), (key, column, value, got[key][column])


def test_min_and_max_of_booleans_and_timestamps_merge_as_values() -> None:
    """A state of min/max over booleans is a boolean (JSON true/false), and merges so."""
    agg = build(AggregationSpec("max", "refunded", "m", {}, "boolean"))
    a = agg.update(agg.initialize(), np.array([False, False]), np.zeros(2, dtype=np.int64))
    b = agg.deserialize(agg.serialize(agg.update(agg.initialize(), np.array([True]), np.zeros(1))))
    assert agg.result(agg.merge(a, b))["m"] is True
    assert agg.result(agg.initialize()) == {"m": None}


def test_each_aggregations_docs_row_lists_the_types_validation_takes() -> None:
    """docs/aggregations.md's input column is what each class's input kind takes."""
    from pathlib import Path

    from pipelines.aggregators import InputKind, get, names

    text = (Path(__file__).parents[3] / "docs" / "aggregations.md").read_text()
    listed: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[0].startswith("`"):
            continue
        for name in cells[0].replace("`", "").split(","):
            takes = cells[1]
            listed[name.strip()] = set() if takes == "none" else set(takes.split(", "))
    built_in = [n for n in names() if get(n).__module__.startswith("pipelines.aggregators.")]
    assert set(listed) == set(built_in)
    for name in built_in:
        assert listed[name] == set(InputKind.types(get(name).input_kind)), name


@pytest.mark.parametrize(
    ("aggregation", "column", "message"),
    [
        (
            "sum",
            "refunded",
            "'refunded' is a boolean column of topic 'payments'; sum takes long or double",
        ),
        (
            "approx_count_distinct",
            "amount",
            "'amount' is a double column of topic 'payments'; "
            "approx_count_distinct takes string, long or timestamp",
        ),
        (
            "quantiles",
            "paid_at",
            "'paid_at' is a timestamp column of topic 'payments'; quantiles takes long or double",
        ),
    ],
)
def test_validation_refuses_a_type_an_aggregation_does_not_take(aggregation, column, message):
    from pipelines.views import check_views

    document = view_document()
    document["views"][0]["aggregation_info"] = [
        {"aggregation": aggregation, "col_name": column, "aggregated_col_name": "x"}
    ]
    problems = [p.line("views.yaml") for p in check_views(document)[1]]
    assert len(problems) == 1 and message in problems[0], problems


def _session_document(key: str) -> dict:
    document = view_document()
    view = document["views"][0]
    del view["grouping_cols"], view["interval"]
    view.update(kind="session", session_key=key, gap="10m", max_duration="4h")
    view.update(kept_fields=["cents", "refunded"], max_kept_events=5)
    return document


def test_a_session_view_skips_nulls_as_sql_does() -> None:
    """Sessions of a required key over columns with nulls: each session's aggregations are
    what SQL gives over its events (sessions cut by the 10-minute gap, in plain Python)."""
    from pipelines.stream.sessions import SessionState
    from pipelines.views.model import SESSION_START

    (view,) = parse_views(_session_document("customer"))
    rows = sorted(random_rows(6, 900), key=lambda r: r["event_time"])
    state = SessionState(view)
    for part in np.array_split(np.arange(len(rows)), 3):
        state.update(batch_of([rows[i] for i in part]))
    restored = SessionState(view)  # the pending events through a checkpoint, masks and all
    restored.load(state.all_table(), state.pending_table())
    state = restored
    state.settle(T0 + 10 * HOUR)
    sessions: dict[tuple, list[dict]] = {}
    last: dict[str, tuple[int, int]] = {}  # customer -> (session start, last event time)
    for row in rows:
        start, previous = last.get(row["customer"], (None, None))
        if start is None or row["event_time"] - previous >= 10 * 60_000:
            start = row["event_time"]
        last[row["customer"]] = (start, row["event_time"])
        sessions.setdefault((row["customer"], start), []).append(row)
    got = {}
    for row in state.all_table().to_pylist():
        results = {}
        for agg in view.aggregators:
            results.update(agg.result(agg.deserialize(row[state_column(agg.out)])))
        got[(row["customer"], row[SESSION_START])] = results
    assert set(got) == set(sessions)
    kept = {
        (row["customer"], row[SESSION_START]): orjson.loads(row["kept_events"])
        for row in state.all_table().to_pylist()
    }
    for key, members in sessions.items():
        first = [{c: r[c] for c in ("event_time", "cents", "refunded")} for r in members[:5]]
        assert kept[key] == first, key  # a null kept field is null, not the 0 it is held as
        for i, case in enumerate(AGGREGATIONS):
            for column, value in reference(case, members, f"a{i}").items():
                assert same(case, value, got[key][column]), (key, case, value, got[key][column])


def test_a_nullable_session_key_is_refused_with_its_reason() -> None:
    from pipelines.views import check_views

    problems = [p.line("views.yaml") for p in check_views(_session_document("card"))[1]]
    assert problems == [
        "views.yaml: views[0] (nulls).session_key: 'card' may be null in topic 'payments': a "
        "session key must be a required string column (sessions of a null key are not "
        "supported yet)"
    ]


def test_rows_with_null_groups_and_null_results_pass_the_segment_schema() -> None:
    """The checks the correction runs on its rows accept what SQL's rules give: a null group
    of a nullable column, a null result over no value; a count is never null."""
    from pipelines.batch.windows import batch_schema
    from quality.exceptions import SchemaViolation
    from quality.schemas import validate_segment

    (view,) = parse_views(view_document())
    got = _stream(view, random_rows(8, 600))
    schema = batch_schema(view)
    rows = [{"window_start": k[0], "shop": k[1], **r} for k, r in got.items()]
    table = pa.Table.from_pylist(rows, schema=schema)
    amounts = f"a{AGGREGATIONS.index(('sum', 'amount', {}, None))}"
    assert table.column("shop").null_count and table.column(amounts).null_count
    validate_segment(view, table, "batch")
    broken = table.set_column(
        table.schema.get_field_index("a0"), "a0", pa.nulls(len(table), pa.int64())
    )
    with pytest.raises(SchemaViolation):
        validate_segment(view, broken, "batch")


def test_null_groups_and_results_are_written_to_the_views_table_and_read_back(tmp_path) -> None:
    """The Iceberg table takes a null group and null results, and gives them back."""
    from pipelines.batch.windows import batch_schema
    from pipelines.tables import REALTIME, replace_hours, table_rows
    from tests.fixtures.tables import local_tables

    (view,) = parse_views(view_document())
    got = _stream(view, [r for r in random_rows(8, 600) if r["event_time"] < T0 + HOUR])
    rows = [{"window_start": k[0], "shop": k[1], **r} for k, r in got.items()]
    written = pa.Table.from_pylist(rows, schema=batch_schema(view))
    tables = local_tables(tmp_path / "root", tmp_path / "catalog.db")
    replace_hours(tables, view, [T0], table_rows(view, written, REALTIME, 0), source=REALTIME)
    read = tables.find(view.name).scan().to_arrow().to_pylist()
    outputs = [f.name for agg in view.aggregators for f in agg.output_fields()]
    back = {r["shop"]: {c: r[c] for c in outputs} for r in read}
    assert None in back and any(v is None for row in back.values() for v in row.values())
    assert back == {r["shop"]: {c: r[c] for c in outputs} for r in rows}


def _row_strategy():
    from hypothesis import strategies as st

    def nullable(values):
        return st.none() | values

    return st.fixed_dictionaries(
        {
            "event_time": st.integers(T0, T0 + 2 * HOUR - 1),
            "customer": st.sampled_from(["u0", "u1"]),
            "shop": nullable(st.sampled_from(["s0", "s1"])),
            "cents": nullable(st.integers(-(2**40), 2**40)),
            "amount": nullable(st.sampled_from([0.5, 25.0, 50.0, 75.25, 99.75, 100.0])),
            "card": nullable(st.sampled_from(["c1", "c2", "c10"])),
            "refunded": nullable(st.booleans()),
            "paid_at": nullable(st.integers(1_600_000_000_000, 1_600_000_100_000)),
            "tier": nullable(st.integers(0, 2)),
        }
    )


def test_any_rows_with_any_nulls_in_any_batches_give_what_sql_gives() -> None:
    """Property: whatever the rows (all null, none passing a where:, ...) and however they
    are cut into batches, every aggregation is SQL's (:func:`reference`)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    (view,) = parse_views(view_document())

    @settings(max_examples=40, deadline=None)
    @given(rows=st.lists(_row_strategy(), min_size=1, max_size=40), cuts=st.integers(1, 4))
    def check(rows: list[dict], cuts: int) -> None:
        rows = [{**r, "pay_id": f"p{i}"} for i, r in enumerate(rows)]
        state = WindowState(view)
        for part in np.array_split(np.arange(len(rows)), cuts):
            if len(part):
                state.update(batch_of([rows[i] for i in part]))
        restored = WindowState(view)
        restored.load(state.all_table())
        got = {}
        for bucket in restored.buckets.values():
            for key, states in bucket.items():
                got[key] = {}
                for agg, s in zip(view.aggregators, states, strict=True):
                    got[key].update(agg.result(s))
        groups = _groups(rows, ("shop",))
        assert set(got) == set(groups)
        for key, members in groups.items():
            for i, case in enumerate(AGGREGATIONS):
                for column, value in reference(case, members, f"a{i}").items():
                    assert same(case, value, got[key][column]), (case, value, got[key][column])

    check()
