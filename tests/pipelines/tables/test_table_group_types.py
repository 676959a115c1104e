"""A view's table holds its grouping columns with their declared types: the stream's segment
files label groups as strings (``str`` of the value), Spark's batch files as Arrow casts them,
and both land as the same typed values."""

from __future__ import annotations

import pyarrow as pa

from pipelines.tables import REALTIME, arrow_schema, iceberg_schema, table_rows
from pipelines.views import parse_views

TOPIC = {
    "topic": "payments",
    "fields": [
        {"name": "merchant", "type": "string"},
        {"name": "store", "type": "long"},
        {"name": "rate", "type": "double"},
        {"name": "present", "type": "boolean"},
        {"name": "settled", "type": "timestamp"},
    ],
}
GROUPS = ["merchant", "store", "rate", "present", "settled"]


def _view():
    (view,) = parse_views(
        {
            "topics": [TOPIC],
            "views": [
                {
                    "name": "v",
                    "topic": "payments",
                    "grouping_cols": GROUPS,
                    "interval": "10m",
                    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
                }
            ],
        }
    )
    return view


def test_grouping_columns_have_their_declared_types_in_the_table() -> None:
    view = _view()
    schema = arrow_schema(view)
    assert [schema.field(c).type for c in GROUPS] == [
        pa.string(),
        pa.int64(),
        pa.float64(),
        pa.bool_(),
        pa.timestamp("us", tz="UTC"),
    ]
    iceberg = iceberg_schema(view)
    assert [str(iceberg.find_field(c).field_type) for c in GROUPS] == [
        "string",
        "long",
        "double",
        "boolean",
        "timestamptz",
    ]


def test_the_streams_string_labels_land_as_typed_values() -> None:
    view = _view()
    values = {
        "merchant": "m-1",
        "store": 12,
        "rate": 1.0,
        "present": True,
        "settled": 1_700_000_000_000,
    }
    rows = pa.table(
        {
            "window_start": pa.array([1_700_000_000_000], pa.int64()),
            **{c: pa.array([str(v)], pa.string()) for c, v in values.items()},
            "n": pa.array([3], pa.int64()),
        }
    )
    (row,) = table_rows(view, rows, REALTIME, 0).to_pylist()
    got = {c: row[c] for c in GROUPS}
    got["settled"] = int(got["settled"].timestamp() * 1000)
    assert got == values
