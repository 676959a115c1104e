"""The reconciliation's causes of a view over derived columns: the archive is read for the
columns they are computed from, and DuckDB computes them (grouping, filter, a quantile's
values) as a plain-Python reading of the same rows gives."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pyarrow as pa

from pipelines.segments import HOUR_MS
from pipelines.views import parse_views
from quality.causes import HourArchive, archive_columns, view_causes, window_values

HOUR = 1_767_225_600_000  # 2026-01-01T00:00Z
DOCUMENT = {
    "topics": [
        {
            "topic": "events",
            "id": "event_id",
            "fields": [
                {"name": "event_id", "type": "string"},
                {"name": "org", "type": "string"},
                {"name": "client", "type": "string"},
                {"name": "bytes_tx", "type": "long", "minimum": 0},
                {"name": "session_id", "type": "string"},
                {"name": "event_type", "type": "string"},
            ],
            "derived": [
                {"name": "org_uc", "expr": "upper(org)"},
                {"name": "kind", "expr": "coalesce(lower(event_type), 'none')"},
                {"name": "shout", "expr": "upper(kind)"},
                {"name": "size", "expr": "abs(bytes_tx)"},
                {"name": "unused", "expr": "lower(client)"},
            ],
        }
    ],
    "views": [
        {
            "name": "by_org",
            "topic": "events",
            "grouping_cols": ["org_uc"],
            "interval": "10m",
            "where": "shout != 'VIEW'",
            "aggregation_info": [
                {"aggregation": "count", "aggregated_col_name": "n"},
                {
                    "aggregation": "quantiles",
                    "col_name": "size",
                    "aggregated_col_name": "size",
                    "params": {"quantiles": [0.5]},
                },
            ],
        }
    ],
}


def _archive() -> HourArchive:
    n = 120
    times = [HOUR + i * (HOUR_MS // n) for i in range(n)]
    rows = {
        "event_id": [f"e{i}" for i in range(n)],
        "event_time": times,
        "partition": [i % 2 for i in range(n)],
        "offset": [i // 2 for i in range(n)],
        "prior_watermark": times,
        "org": [["acme", "Zed", "ünï"][i % 3] for i in range(n)],
        "event_type": [["View", "click", "ERROR", "view"][i % 4] for i in range(n)],
        "bytes_tx": [i * 37 % 1000 for i in range(n)],
    }
    types = {"partition": pa.int32(), "offset": pa.int64(), "prior_watermark": pa.int64()}
    table = pa.table({k: pa.array(v, types.get(k)) for k, v in rows.items()})
    return HourArchive("events", HOUR, table, 0)


def test_causes_read_the_stored_columns_and_compute_the_derived_ones() -> None:
    (view,) = parse_views(DOCUMENT)
    assert archive_columns([view]) == ["bytes_tx", "event_type", "org"]
    archive = _archive()
    rows = archive.rows.to_pylist()
    expected_counts: dict[tuple, int] = defaultdict(int)
    expected_sizes: dict[tuple, list] = defaultdict(list)
    for row in rows:
        if row["event_type"].lower().upper() == "VIEW":
            continue
        start = row["event_time"] - row["event_time"] % view.step_ms
        key = (datetime.fromtimestamp(start / 1000, UTC).isoformat(), row["org"].upper())
        expected_counts[key] += 1
        expected_sizes[key].append(float(abs(row["bytes_tx"])))
    assert len(expected_counts) > 6
    _, per_key = view_causes(archive, view)
    assert {key: causes.deliveries for key, causes in per_key.items()} == expected_counts
    quantiles = next(a for a in view.aggregators if a.name == "quantiles")
    values = window_values(archive, view, quantiles)
    assert values == {key: sorted(sizes) for key, sizes in expected_sizes.items()}
