"""The quality library follows a topic's declaration, for a topic unlike the generator's.

A topic of card payments: nullable string, double and long columns, a boolean, declared
minimums, no id (and the same topic with an id). Archived tables are built with pyarrow from
``archive_schema(declaration)``, as the archive writer lays them out; the oracles are plain
Python over the rows written.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.raw.archive_checks import evaluate_archive_schema
from pipelines.archive.schema import archive_schema
from pipelines.events.declaration import TopicDeclaration
from pipelines.segments import HOUR_MS, archive_events_key
from pipelines.storage import LocalObjectStore
from pipelines.views import View, parse_views
from quality.causes import archive_columns, id_column, read_hour_archive, view_causes
from quality.exceptions import SchemaViolation
from quality.expectations import build_suite
from quality.reconcile import SessionCauses
from quality.reconcile.sessions import archive_rows
from quality.schemas import SegmentKind, segment_spec, validate_archive_events

HOUR = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS
FIELDS = [
    {"name": "merchant", "type": "string", "path": "merchant.name"},
    {"name": "amount", "type": "double", "minimum": 0},
    {"name": "items", "type": "long", "minimum": 1},
    {"name": "refunded", "type": "boolean"},
    {"name": "refund_reason", "type": "string", "nullable": True},
    {"name": "fee", "type": "double", "nullable": True},
    {"name": "tip_cents", "type": "long", "nullable": True},
    {"name": "flagged", "type": "boolean", "nullable": True},
]
PAYMENTS = TopicDeclaration.model_validate(
    {"topic": "payments", "event_time": {"path": "created", "format": "iso8601"}, "fields": FIELDS}
)
WITH_ID = TopicDeclaration.model_validate(
    {
        "topic": "payments",
        "id": "payment_id",
        "event_time": {"path": "created", "format": "iso8601"},
        "fields": [{"name": "payment_id", "type": "string", "nullable": True}, *FIELDS],
    }
)


def _rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` valid payments of the hour; every third repeats an earlier payment (a producer's
    retry: same content, a later offset); nullable columns null in about half the rows."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for offset in range(n):
        if rows and offset % 3 == 2:
            row = dict(rng.choice(rows))
        else:
            row = {
                "payment_id": None if rng.random() < 0.1 else f"p{rng.randrange(10**9)}",
                "event_time": HOUR + rng.randrange(HOUR_MS),
                "merchant": rng.choice(["acme", "globex", "initech"]),
                "amount": round(rng.uniform(0, 500), 2),
                "items": rng.randint(1, 9),
                "refunded": rng.random() < 0.2,
                "refund_reason": rng.choice([None, "", "fraud", "duplicate"]),
                "fee": rng.choice([None, 0.3, 1.25]),
                "tip_cents": rng.choice([None, 0, 150, 2**62]),
                "flagged": rng.choice([None, True, False]),
            }
        row.update(partition=offset % 2, offset=offset, topic="payments")
        row["kafka_timestamp"] = row["event_time"]
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]], declaration: TopicDeclaration) -> pa.Table:
    schema = archive_schema(declaration)
    return pa.table({f.name: pa.array([r[f.name] for r in rows], f.type) for f in schema}, schema)


def _rejected(table: pa.Table, declaration: TopicDeclaration = PAYMENTS) -> str:
    with pytest.raises(SchemaViolation) as caught:
        validate_archive_events(table, declaration)
    return str(caught.value)


def _set(table: pa.Table, column: str, row: int, value: Any) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    at = table.schema.get_field_index(column)
    return table.set_column(
        at, table.schema.field(at), pa.array(values, table.schema.field(at).type)
    )


# --- the archive's pandera schema ---------------------------------------------------------------


def test_a_valid_archived_table_with_nulls_in_nullable_columns_is_accepted() -> None:
    table = _table(_rows(60), PAYMENTS)
    for name in ("refund_reason", "fee", "tip_cents", "flagged"):
        assert table.column(name).null_count > 0
    assert "" in table.column("refund_reason").to_pylist()  # a nullable string may be empty
    assert len(validate_archive_events(table, PAYMENTS)) == table.num_rows
    with_id = _table(_rows(60), WITH_ID)
    assert len(validate_archive_events(with_id, WITH_ID)) == with_id.num_rows


@pytest.mark.parametrize(
    ("column", "value"),
    [("merchant", None), ("amount", None), ("items", None), ("refunded", None)],
)
def test_a_null_in_a_required_column_is_refused_naming_it(column: str, value: Any) -> None:
    message = _rejected(_set(_table(_rows(20), PAYMENTS), column, 4, value))
    assert "archived events of topic 'payments' break the schema (1 problem(s))" in message
    assert f"column {column!r} fails not-null in 1 row(s), e.g. rows 4" in message


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("amount", -0.5, "column 'amount' fails '>= 0' in 1 row(s), e.g. -0.5"),
        ("items", 0, "column 'items' fails '>= 1' in 1 row(s), e.g. 0"),
        ("merchant", "", "column 'merchant' fails 'non-empty' in 1 row(s), e.g. ''"),
    ],
)
def test_a_value_outside_its_declared_range_is_refused_naming_the_column(
    column: str, value: Any, expected: str
) -> None:
    message = _rejected(_set(_table(_rows(20), PAYMENTS), column, 5, value))
    assert "(1 problem(s))" in message and expected in message


def test_columns_follow_the_declaration_not_the_generator() -> None:
    table = _table(_rows(10), PAYMENTS)
    extra = table.append_column("event_id", pa.array(["x"] * table.num_rows))
    assert "column 'event_id' is not in the schema" in _rejected(extra)
    assert "column 'fee' is missing" in _rejected(table.drop(["fee"]))
    text = table.set_column(
        table.schema.get_field_index("flagged"), "flagged", pa.array(["yes"] * table.num_rows)
    )
    assert "column 'flagged'" in _rejected(text)


# --- the archive check, one hour holding two topics -------------------------------------------


def _write(store: LocalObjectStore, topic: str, table: pa.Table, first: int = 0) -> str:
    key = archive_events_key(HOUR, topic, 0, first, first + table.num_rows)
    path = Path(store.root) / key
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return key


def test_the_archive_check_holds_each_topic_to_its_own_declaration(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "storage")
    orders = PAYMENTS.model_copy(update={"topic": "orders-eu"})  # a name with dashes
    rows = _rows(30)
    _write(store, "payments", _table(rows, PAYMENTS))
    order_rows = [{**r, "topic": "orders-eu"} for r in _rows(12, seed=3)]
    _write(store, "orders-eu", _table(order_rows, orders).drop(["tip_cents"]))  # older file
    declarations = {"payments": PAYMENTS, "orders-eu": orders}
    result = evaluate_archive_schema(store, [HOUR], declarations)
    assert result.passed, result.description
    assert result.metadata["events"].value == 42
    assert result.metadata["event_files"].value == 2

    # a required column null in one topic's file: that topic fails, named with its column
    broken = _set(_table(order_rows, orders), "items", 2, None)
    broken = broken.cast(pa.schema([f.with_nullable(True) for f in broken.schema]))  # a bad writer
    _write(store, "orders-eu", broken, first=100)
    result = evaluate_archive_schema(store, [HOUR], declarations)
    assert not result.passed
    (problem,) = next(iter(result.metadata["violations"].value.values()))
    assert problem.startswith("archived events of topic 'orders-eu' break the schema")
    assert "column 'items' fails not-null in 1 row(s)" in problem

    # a topic declared nowhere (no "*" either) cannot be checked, and says so
    result = evaluate_archive_schema(store, [HOUR], {"orders-eu": orders})
    problems = next(iter(result.metadata["violations"].value.values()))
    assert any("topic 'payments': no declaration" in p for p in problems)


def test_an_older_file_with_a_column_removed_since_passes_the_archive_check(tmp_path) -> None:
    """A file written under an older declaration keeps a column the declaration no longer has:
    only the declared columns are checked, so the hours from before the change stay valid."""
    store = LocalObjectStore(tmp_path / "storage")
    rows = _rows(30)
    _write(store, "payments", _table(rows, PAYMENTS))  # written while tip_cents was declared
    newer = TopicDeclaration.model_validate(
        {**PAYMENTS.model_dump(), "fields": [f for f in FIELDS if f["name"] != "tip_cents"]}
    )
    later = [{**r, "offset": r["offset"] + 100} for r in _rows(10, seed=5)]
    _write(store, "payments", _table(later, newer), first=100)
    result = evaluate_archive_schema(store, [HOUR], {"payments": newer})
    assert result.passed, result.description
    assert result.metadata["events"].value == 40

    # the declared columns are still checked in the older file
    older = [{**r, "offset": r["offset"] + 200} for r in rows]
    broken = _set(_table(older, PAYMENTS), "items", 3, None)
    broken = broken.cast(pa.schema([f.with_nullable(True) for f in broken.schema]))
    _write(store, "payments", broken, first=200)
    result = evaluate_archive_schema(store, [HOUR], {"payments": newer})
    assert not result.passed
    (problem,) = next(iter(result.metadata["violations"].value.values()))
    assert "column 'items' fails not-null in 1 row(s)" in problem


def test_a_required_column_declared_since_is_null_in_older_files_only(tmp_path) -> None:
    """Files archived before a required field was declared lack it: their rows read it as
    null and pass; a file that has the column is still held to not-null."""
    store = LocalObjectStore(tmp_path / "storage")
    rows = _rows(30)
    older = TopicDeclaration.model_validate(
        {**PAYMENTS.model_dump(), "fields": [f for f in FIELDS if f["name"] != "items"]}
    )
    _write(store, "payments", _table(rows, older))  # written before items was declared
    later = [{**r, "offset": r["offset"] + 100} for r in _rows(10, seed=5)]
    _write(store, "payments", _table(later, PAYMENTS), first=100)
    result = evaluate_archive_schema(store, [HOUR], {"payments": PAYMENTS})
    assert result.passed, result.description

    broken = _set(
        _table([{**r, "offset": r["offset"] + 100} for r in later], PAYMENTS), "items", 1, None
    )
    broken = broken.cast(pa.schema([f.with_nullable(True) for f in broken.schema]))
    _write(store, "payments", broken, first=200)
    result = evaluate_archive_schema(store, [HOUR], {"payments": PAYMENTS})
    assert not result.passed
    (problem,) = next(iter(result.metadata["violations"].value.values()))
    assert "required column 'items' is null in 1 row(s) of the files that hold it" in problem


# --- causes: duplicates only by a declared id ---------------------------------------------------

WINDOWED = {
    "name": "payments_by_merchant",
    "topic": "payments",
    "grouping_cols": ["merchant"],
    "interval": "10m",
    "aggregation_info": [
        {"aggregation": "count", "aggregated_col_name": "payments"},
        {"aggregation": "min", "col_name": "amount", "aggregated_col_name": "amount_min"},
        {"aggregation": "max", "col_name": "fee", "aggregated_col_name": "fee_max"},
        {"aggregation": "sum", "col_name": "items", "aggregated_col_name": "items_total"},
    ],
}
SESSIONS = {
    "name": "payment_sessions",
    "kind": "session",
    "topic": "payments",
    "session_key": "merchant",
    "gap": "5m",
    "max_duration": "1h",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "payments"}],
}


def _views(declaration: TopicDeclaration) -> list[View]:
    return parse_views([WINDOWED, SESSIONS], topics={"payments": declaration})


def _archived(tmp_path: Path, declaration: TopicDeclaration, rows: list[dict]) -> LocalObjectStore:
    store = LocalObjectStore(tmp_path / "storage")
    for partition in (0, 1):
        mine = [r for r in rows if r["partition"] == partition]
        table = _table(mine, declaration)
        key = archive_events_key(HOUR, "payments", partition, 0, len(rows))
        path = Path(store.root) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    return store


def _repeats(rows: list[dict], key: str) -> int:
    """Deliveries of an id already delivered (null ids repeat nothing)."""
    counts = Counter(r[key] for r in rows if r[key] is not None)
    return sum(c - 1 for c in counts.values())


@pytest.mark.parametrize("declaration", [PAYMENTS, WITH_ID], ids=["no id", "id"])
def test_causes_count_duplicates_by_the_declared_id_only(
    tmp_path: Path, declaration: TopicDeclaration
) -> None:
    rows = _rows(300)
    store = _archived(tmp_path, declaration, rows)
    view = _views(declaration)[0]
    assert id_column([view]) == declaration.id
    archive = read_hour_archive(
        store, "payments", HOUR, archive_columns([view]), id_col=declaration.id
    )
    total, per_key = view_causes(archive, view)
    expected = 0 if declaration.id is None else _repeats(rows, "payment_id")
    assert declaration.id is None or expected > 0
    assert total.events == len(rows)
    assert total.duplicates == expected
    assert sum(c.duplicates for c in per_key.values()) == expected
    by_group = Counter((r["event_time"] // 600_000, r["merchant"]) for r in rows)
    assert sorted(c.deliveries for c in per_key.values()) == sorted(by_group.values())


@pytest.mark.parametrize("declaration", [PAYMENTS, WITH_ID], ids=["no id", "id"])
def test_session_causes_read_the_declared_id_or_none(
    tmp_path: Path, declaration: TopicDeclaration
) -> None:
    rows = _rows(300)
    store = _archived(tmp_path, declaration, rows)
    view = _views(declaration)[1]
    archived = archive_rows(store, view, HOUR, None)
    assert ("payment_id" in archived.column_names) == (declaration.id is not None)
    causes = SessionCauses(view, archived)
    expected = 0 if declaration.id is None else _repeats(rows, "payment_id")
    assert causes.total.events == len(rows)
    assert causes.total.duplicates == expected
    whole = [
        causes.of(m, HOUR - HOUR_MS, HOUR + 2 * HOUR_MS) for m in ("acme", "globex", "initech")
    ]
    assert sum(c.duplicates for c in whole) == expected
    assert sum(c.deliveries for c in whole) == len(rows)


# --- segment rules follow the declaration -------------------------------------------------------


def test_metric_and_group_rules_follow_the_declaration() -> None:
    view = _views(PAYMENTS)[0]
    spec = segment_spec(view, SegmentKind.QUERY)
    rules = {c.name: [r.label for r in c.rules] for c in spec.columns}
    assert rules["amount_min"] == [">= 0"]  # amount's declared minimum
    assert rules["fee_max"] == []  # fee declares none
    assert rules["items_total"] == [">= 0"]  # a sum of values >= 1
    assert rules["merchant"] == ["non-empty"] and not spec.column("merchant").nullable
    grouped = parse_views(
        [{**WINDOWED, "grouping_cols": ["refund_reason"]}], topics={"payments": PAYMENTS}
    )[0]
    column = segment_spec(grouped, SegmentKind.QUERY).column("refund_reason")
    assert column is not None and column.nullable and column.rules == ()


def test_an_older_file_without_a_column_declared_since_reads_it_as_null(tmp_path: Path) -> None:
    rows = _rows(120)
    store = _archived(tmp_path, WITH_ID, rows)
    older = [r for r in rows if r["partition"] == 0]  # written before payment_id was declared
    key = archive_events_key(HOUR, "payments", 0, 0, len(rows))
    pq.write_table(_table(older, PAYMENTS), Path(store.root) / key)
    view = _views(WITH_ID)[0]
    archive = read_hour_archive(
        store, "payments", HOUR, archive_columns([view]), id_col="payment_id"
    )
    total, _ = view_causes(archive, view)
    newer = [r for r in rows if r["partition"] == 1]
    assert total.events == len(rows)
    assert total.duplicates == _repeats(newer, "payment_id") > 0  # a null id repeats nothing


def test_the_expectation_suite_holds_the_declared_minimum_only() -> None:
    suite = build_suite(_views(PAYMENTS)[0], HOUR, HOUR + HOUR_MS)
    ranges = [e.description for e in suite.expectations if e.description.endswith(">= 0")]
    assert "amount_min >= 0" in ranges and "items_total >= 0" in ranges
    assert not any("fee_max" in (e.description or "") for e in suite.expectations)
