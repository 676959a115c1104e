"""The realtime-vs-corrected comparison as pure functions over two tables."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.exceptions import ConfigError
from quality.compare import (
    APPROXIMATE,
    EXACT,
    INFORMATIONAL,
    Tolerance,
    compare_tables,
    metric_kinds,
)
from tests.fixtures.dagster_fixture import example_views

KEYS = ["window_start", "org"]
METRICS = {"events": EXACT, "sessions": APPROXIMATE, "top": INFORMATIONAL}


def table(rows: list[tuple[int, str, int, int, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"window_start": w, "org": o, "events": e, "sessions": s, "top": t}
            for w, o, e, s, t in rows
        ]
    )


def test_identical_tables_pass_with_zero_error() -> None:
    rows = [(0, "a", 10, 5, "x"), (0, "b", 20, 7, "y")]
    result = compare_tables(table(rows), table(rows), KEYS, METRICS)
    assert result.passed
    assert result.matched == 2 and not result.missing and not result.extra
    events = result.metrics[0]
    assert (events.rel_max, events.rel_mean, events.abs_max, events.mismatched) == (0, 0, 0, 0)


def test_errors_missing_and_extra_groups_are_measured() -> None:
    expected = table([(0, "a", 100, 50, "x"), (0, "b", 200, 70, "y"), (0, "c", 1, 1, "z")])
    actual = table([(0, "a", 103, 50, "x"), (0, "b", 200, 77, "q"), (0, "d", 9, 9, "z")])
    result = compare_tables(expected, actual, KEYS, METRICS, Tolerance(max_group_mismatch=1.0))
    assert result.missing == [(0, "c")] and result.extra == [(0, "d")]
    events, sessions, top = result.metrics
    assert events.abs_max == 3 and events.abs_mean == 1.5
    assert events.rel_max == pytest.approx(0.03) and events.rel_mean == pytest.approx(0.015)
    assert sessions.rel_max == pytest.approx(0.1)
    assert top.mismatched == 1 and top.passed  # rankings never fail the comparison
    assert result.passed  # exact 1.5% mean, approximate 5% mean: within 5% / 10%
    summary = result.summary()
    assert summary["groups_missing"] == 1 and summary["metrics"]["events"]["kind"] == EXACT


def test_exact_metrics_beyond_tolerance_fail_with_a_reason() -> None:
    expected = table([(0, "a", 100, 5, "x"), (0, "b", 100, 5, "x")])
    actual = table([(0, "a", 108, 5, "x"), (0, "b", 100, 5, "x")])
    assert compare_tables(expected, actual, KEYS, METRICS).passed  # mean 4% <= 5%
    strict = compare_tables(expected, actual, KEYS, METRICS, Tolerance(statistic="max"))
    assert not strict.passed  # max 8% > 5%
    assert strict.failures == ["events: max relative error 8.00% > 5.00%"]
    worse = table([(0, "a", 120, 5, "x"), (0, "b", 100, 5, "x")])
    assert not compare_tables(expected, worse, KEYS, METRICS).passed  # mean 10% > 5%


def test_a_string_metric_errs_by_the_share_of_rows_that_differ() -> None:
    """An exact string metric (first/last of a field): one row of 40 differing is a 2.5% mean
    error, not 100% (equal strings used to count for nothing, so any difference read as all)."""
    rows = [(0, f"o{i}", 1, 1, "x") for i in range(40)]
    kinds = {"events": EXACT, "top": EXACT}
    differs = [*rows[:-1], (0, "o39", 1, 1, "y")]
    result = compare_tables(table(rows), table(differs), KEYS, kinds)
    top = result.metrics[1]
    assert (top.mismatched, top.rel_mean, top.rel_max) == (1, pytest.approx(0.025), 1.0)
    assert result.passed
    many = [(0, f"o{i}", 1, 1, "y" if i < 4 else "x") for i in range(40)]
    assert not compare_tables(table(rows), table(many), KEYS, kinds).passed  # 10% > 5%


def test_group_mismatch_beyond_tolerance_fails() -> None:
    expected = table([(0, o, 1, 1, "x") for o in "abcdefghij"])
    actual = table([(0, o, 1, 1, "x") for o in "abcdefgh"])
    result = compare_tables(expected, actual, KEYS, METRICS)
    assert not result.passed
    assert "2 missing" in result.failures[0]


def test_nulls_and_zero_references_count_as_full_errors() -> None:
    expected = table([(0, "a", 0, 1, "x")])
    actual = pa.Table.from_pylist(
        [{"window_start": 0, "org": "a", "events": 3, "sessions": None, "top": "x"}]
    )
    result = compare_tables(expected, actual, KEYS, METRICS, Tolerance(approximate_relative=1.0))
    events, sessions, _ = result.metrics
    assert events.rel_max == 1.0 and sessions.rel_max == 1.0


def test_tolerance_is_validated_and_read_from_the_environment(monkeypatch) -> None:
    with pytest.raises(ConfigError):
        Tolerance(statistic="median")
    with pytest.raises(ConfigError):
        Tolerance(relative=-1)
    monkeypatch.setenv("SLUICE_CHECK_RELATIVE_TOLERANCE", "0.01")
    monkeypatch.setenv("SLUICE_CHECK_STATISTIC", "max")
    tolerance = Tolerance.from_env()
    assert tolerance.relative == 0.01 and tolerance.statistic == "max"
    monkeypatch.setenv("SLUICE_CHECK_RELATIVE_TOLERANCE", "lots")
    with pytest.raises(ConfigError, match="lots"):
        Tolerance.from_env()


def test_metric_kinds_follow_the_aggregations_of_the_example_views() -> None:
    kinds = {v.name: metric_kinds(v) for v in example_views()}
    assert set(kinds["traffic_by_org"].values()) == {EXACT}
    assert kinds["sessions_by_org"] == {"sessions": APPROXIMATE, "clients": EXACT}
    assert kinds["bytes_quantiles_by_type"]["bytes_p95"] == APPROXIMATE
    assert kinds["top_clients_hourly"]["top_clients"] == INFORMATIONAL
    assert kinds["top_clients_hourly"]["first_type"] == EXACT


def _reference(expected: pa.Table, actual: pa.Table, keys, metrics, tolerance):
    """The comparison's definition, row by row in Python (what the columnar one replaced)."""
    from quality.compare import _metric_error, nulls_first, rows_by_key

    want, got = rows_by_key(expected, keys), rows_by_key(actual, keys)
    matched = [k for k in want if k in got]
    errors = [
        _metric_error(c, kind, [(want[k].get(c), got[k].get(c)) for k in matched], tolerance)
        for c, kind in metrics.items()
    ]
    return (
        len(want),
        len(got),
        len(matched),
        sorted((k for k in want if k not in got), key=nulls_first),
        sorted((k for k in got if k not in want), key=nulls_first),
        errors,
    )


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_the_columnar_comparison_agrees_with_the_row_by_row_definition(data) -> None:
    """Repeated keys, nulls, zeros, NaN and infinities, strings, a column one side lacks, and
    timestamps typed alike or not: every figure equal, not merely close."""
    ints = st.one_of(st.none(), st.integers(-3, 3), st.integers(-(2**62), 2**62))
    floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64))
    row = st.fixed_dictionaries(
        {
            "window_start": st.integers(0, 3),
            "org": st.one_of(st.none(), st.sampled_from("abc")),
            "events": ints,
            "mean": floats,
            "top": st.one_of(st.none(), st.sampled_from(["x", "y"])),
        }
    )
    unit = data.draw(st.sampled_from(["ms", "us"]))

    def table(rows, time_unit="ms", drop=()):
        made = pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("window_start", pa.int64()),
                    ("org", pa.string()),
                    ("events", pa.int64()),
                    ("mean", pa.float64()),
                    ("top", pa.string()),
                ]
            ),
        )
        start = made.column("window_start").cast(pa.timestamp(time_unit, tz="UTC"))
        made = made.set_column(0, "window_start", start)
        return made.drop_columns(list(drop))

    expected = table(data.draw(st.lists(row, max_size=12)))
    drop = data.draw(st.sampled_from([(), ("top",)]))
    actual = table(data.draw(st.lists(row, max_size=12)), unit, drop)
    metrics = {"events": EXACT, "mean": APPROXIMATE, "top": INFORMATIONAL}
    tolerance = Tolerance()
    got = compare_tables(expected, actual, KEYS, metrics, tolerance)
    want = _reference(expected, actual, KEYS, metrics, tolerance)
    assert (got.expected_rows, got.actual_rows, got.matched, got.missing, got.extra) == want[:5]
    for mine, theirs in zip(got.metrics, want[5], strict=True):
        assert repr(mine.__dict__) == repr(theirs.__dict__)  # NaN equal to NaN, -0.0 to -0.0
