"""A topic of nested JSON with ISO-8601 times, declared with paths, flows through a task into
the archive and the realtime views as the same events in the generator's flat shape do;
the oracle reads the messages with the standard json module."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime

import orjson
import pyarrow.parquet as pq

from pipelines.config import SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.serving.query import query_view
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import VALID_KINDS, CollectingDeadLetters, Record
from pipelines.views import parse_views

DECLARATION = {
    "topic": "orders",
    "id": "event_id",
    "event_time": {"path": "when.created", "format": "iso8601"},
    "fields": [
        {"name": "event_id", "type": "string", "path": "id"},
        {"name": "org", "type": "string", "path": "merchant.org"},
        {"name": "client", "type": "string", "path": "device.names[1]"},
        {"name": "bytes_tx", "type": "long", "path": "size.bytes"},
        {"name": "session_id", "type": "string", "path": "session"},
        {"name": "event_type", "type": "string", "path": "kind"},
    ],
}
VIEW = {
    "name": "orders_by_org",
    "topic": "orders",
    "grouping_cols": ["org"],
    "interval": "10m",
    "allowed_lateness": "1d",  # every event counts: the oracle needs no lateness rule
    "aggregation_info": [
        {"aggregation": "count", "aggregated_col_name": "events"},
        {"aggregation": "sum", "col_name": "bytes_tx", "aggregated_col_name": "bytes"},
    ],
}


def _nested(flat: dict) -> bytes:
    at = datetime.fromtimestamp(flat["event_time"] / 1000, UTC).isoformat(timespec="milliseconds")
    return orjson.dumps(
        {
            "id": flat["event_id"],
            "when": {"created": at.replace("+00:00", "Z")},
            "merchant": {"org": flat["org"]},
            "device": {"names": ["phone", flat["client"]]},
            "size": {"bytes": flat["bytes_tx"]},
            "session": flat["session_id"],
            "kind": flat["event_type"],
        }
    )


def test_a_nested_topic_reaches_the_archive_and_the_views(tmp_path) -> None:
    options = GeneratorOptions(max_events=3_000, peak_rate=20_000, speedup=60, warmup_events=0)
    flat = [  # the kinds the generator means to be accepted (the rest are hostile on purpose)
        json.loads(m.value)
        for m in synthesize(load_trace("nyc_taxi"), options)
        if m.kind in VALID_KINDS
    ][:2_000]
    (view,) = parse_views({"topics": [DECLARATION], "views": [VIEW]})
    store = LocalObjectStore(tmp_path / "storage")
    sink = CollectingDeadLetters()
    task = StreamTask("orders", 0, [view], store, sink, SluiceSettings(state_dir=tmp_path))
    task.start_at(0)
    records = [Record(i, 1_000 + i, b"k", _nested(e)) for i, e in enumerate(flat)]
    for lo in range(0, len(records), 500):
        task.process(records[lo : lo + 500])
    task.flush()
    assert sink.letters == []

    archived = [
        row
        for key in store.list("archive/events/")
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist()
    ]
    fields = ["event_id", "event_time", "org", "client", "bytes_tx", "session_id", "event_type"]
    assert sorted(tuple(r[f] for f in fields) for r in archived) == sorted(
        tuple(e[f] for f in fields) for e in flat
    )

    window = 600_000
    counts = Counter((e["event_time"] - e["event_time"] % window, e["org"]) for e in flat)
    sums = Counter()
    for e in flat:
        sums[(e["event_time"] - e["event_time"] % window, e["org"])] += e["bytes_tx"]
    start = min(e["event_time"] for e in flat) // window * window
    end = max(e["event_time"] for e in flat) + window
    rows = query_view(store, view, start, end, "realtime", tables=None).to_pylist()  # type: ignore[arg-type]
    got = {
        (int(r["window_start"].timestamp() * 1000), r["org"]): (r["events"], r["bytes"])
        for r in rows
    }
    assert got == {k: (counts[k], float(sums[k])) for k in counts}
