"""The corrected-segment schema in Spark: a real correction passes it, broken frames fail it,
and a failing validator stops ``correct_hours`` before the view is published."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type

from pipelines.batch import CorrectionResult, archive_hours, batch_schema, correct_hours
from pipelines.generator import GeneratorOptions
from pipelines.segments import HOUR_MS
from pipelines.serving.query import query_view
from pipelines.tables import ViewTables
from pipelines.testing import StreamRun, run_stream
from pipelines.views import View, parse_views
from quality.exceptions import SchemaViolation
from quality.schemas import SegmentKind, segment_spec, validate_segment, validate_spark_segment
from tests.fixtures.dagster_fixture import example_views
from tests.fixtures.spark import spark  # noqa: F401  (session-scoped SparkSession)
from tests.fixtures.tables import local_tables

pytestmark = pytest.mark.spark

NO_GROUPS = {
    "name": "all_2h",
    "topic": "events",
    "grouping_cols": [],
    "interval": "2h",
    "aggregation_info": [
        {"aggregation": "count", "aggregated_col_name": "events"},
        {"aggregation": "first", "col_name": "bytes_tx", "aggregated_col_name": "first_bytes"},
        {"aggregation": "top_k", "col_name": "org", "aggregated_col_name": "top_orgs"},
    ],
}


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> StreamRun:
    shipped = [v for v in example_views() if v.name in ("traffic_by_org", "top_clients_hourly")]
    views = [*shipped, *parse_views([NO_GROUPS])]
    options = GeneratorOptions(max_events=3000, peak_rate=20000.0, duplicate_share=0.03)
    return run_stream(tmp_path_factory.mktemp("spark-schemas") / "storage", views, options=options)


@pytest.fixture(scope="module")
def tables(streamed: StreamRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ViewTables]:
    tables = local_tables(streamed.store.root, tmp_path_factory.mktemp("catalog") / "cat.db")
    yield tables
    tables.close()


@pytest.fixture(scope="module")
def corrected(spark, streamed: StreamRun, tables: ViewTables) -> list[CorrectionResult]:  # noqa: F811
    return correct_hours(
        spark,
        streamed.store,
        streamed.views,
        archive_hours(streamed.store),
        validate_segment=validate_spark_segment,
        tables=tables,
    )


def _batch_rows(view: View, files: Sequence[str]) -> pa.Table:
    """The correction's rows of a segment as it computed them (:func:`batch_schema`), read
    back from the table's files (times as epoch ms, without the table's own columns)."""
    schema = batch_schema(view)
    out = []
    for path in files:
        table = pq.read_table(path)
        columns = []
        for field in schema:
            column = table.column(field.name)
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
            columns.append(column.cast(field.type))
        out.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(out)


def _view(streamed: StreamRun, name: str) -> View:
    return next(v for v in streamed.views if v.name == name)


def test_a_validated_correction_publishes_rows_that_match_every_schema(
    streamed: StreamRun, corrected: list[CorrectionResult], tables: ViewTables
) -> None:
    published = [r for r in corrected if not r.skipped]
    assert {r.view for r in published} == {v.name for v in streamed.views}
    for result in published:
        view = _view(streamed, result.view)
        rows = _batch_rows(view, result.files)
        assert len(validate_segment(view, rows, SegmentKind.BATCH)) == result.rows
    hours = streamed.event_hours()
    for view in streamed.views:
        served = query_view(
            streamed.store, view, hours[0], hours[-1] + HOUR_MS, prefer="batch", tables=tables
        )
        assert len(validate_segment(view, served)) == served.num_rows > 0


def _corrected_rows(streamed: StreamRun, corrected: list[CorrectionResult], name: str):
    result = next(r for r in corrected if r.view == name and not r.skipped and r.rows > 5)
    view = _view(streamed, name)
    return _batch_rows(view, result.files).to_pandas()


def _spark_frame(spark, view: View, rows: pd.DataFrame) -> DataFrame:  # noqa: F811
    """Rows as a Spark frame with the correction's column types."""
    spec = segment_spec(view, SegmentKind.BATCH)
    ddl = ", ".join(f"`{c.name}` {from_arrow_type(c.type).simpleString()}" for c in spec.columns)
    return spark.createDataFrame(rows, schema=ddl)


def test_the_spark_validator_names_column_check_and_values_of_each_break(
    spark,  # noqa: F811
    streamed: StreamRun,
    corrected: list[CorrectionResult],
) -> None:
    view = _view(streamed, "traffic_by_org")
    rows = _corrected_rows(streamed, corrected, view.name)
    validate_spark_segment(_spark_frame(spark, view, rows), view)
    rows.loc[0, "events"] = -4
    rows.loc[1, "window_start"] += 1
    rows.loc[2, "org"] = None
    rows = pd.concat([rows, rows.iloc[[3]]], ignore_index=True)
    with pytest.raises(SchemaViolation) as caught:
        validate_spark_segment(_spark_frame(spark, view, rows), view)
    message = str(caught.value)
    assert message.startswith("batch rows of view traffic_by_org break the schema (4 problem(s))")
    assert "column 'events' fails '>= 0' in 1 row(s), e.g. -4" in message
    window = int(rows.loc[1, "window_start"])
    assert f"column 'window_start' fails 'multiple of 10m' in 1 row(s), e.g. {window}" in message
    assert "column 'org' fails not-null in 1 row(s)" in message
    key = (int(rows.loc[3, "window_start"]), rows.loc[3, "org"])
    assert (
        f"columns (window_start, org) fail 'unique': 1 key(s) repeat, e.g. ({key[0]}, {key[1]!r})"
        in message
    )


def test_the_spark_validator_rejects_a_wrong_type(
    spark,  # noqa: F811
    streamed: StreamRun,
    corrected: list[CorrectionResult],
) -> None:
    view = _view(streamed, "traffic_by_org")
    frame = _spark_frame(spark, view, _corrected_rows(streamed, corrected, view.name))
    with pytest.raises(SchemaViolation) as caught:
        validate_spark_segment(frame.withColumn("events", F.col("events").cast("int")), view)
    assert "column 'events' fails dtype('LongType()')" in str(caught.value)
    assert "got IntegerType()" in str(caught.value)


def test_a_violation_stops_the_correction_before_the_view_is_published(
    spark,  # noqa: F811
    streamed: StreamRun,
    corrected: list[CorrectionResult],
    tables: ViewTables,
) -> None:
    view = _view(streamed, "all_2h")
    hours = archive_hours(streamed.store)

    def negate_counts(frame: DataFrame, checked: View) -> None:
        validate_spark_segment(frame.withColumn("events", -F.col("events")), checked)

    with pytest.raises(SchemaViolation) as caught:
        correct_hours(
            spark, streamed.store, [view], hours, validate_segment=negate_counts, tables=tables
        )
    assert "batch rows of view all_2h" in str(caught.value)
    assert "column 'events' fails '>= 0'" in str(caught.value)
    served = query_view(
        streamed.store, view, hours[0], hours[-1] + HOUR_MS, prefer="batch", tables=tables
    )
    # only the fixture's valid correction (v1) is served: the failed run published nothing
    assert set(served.column("source").to_pylist()) == {"batch v1"}
