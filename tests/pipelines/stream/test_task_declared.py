"""A task decodes with its views' declaration: the generator's declaration gives the same
segments and dead letters as the hand-written decoder, and a nested topic's columns reach
its views."""

from __future__ import annotations

import io
from dataclasses import dataclass, replace

import orjson
import pyarrow.parquet as pq
import yaml

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import DeclaredDecoder
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.generator.decoder import decode_batch
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import load_views

GENERATOR = TopicDeclaration(
    **yaml.safe_load((PROJECT_ROOT / "data" / "topics.yaml").read_text())["topics"][0]
)


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes | None
    key: bytes | None = None


def _run(tmp_path, views, records, by_hand=False):
    settings = SluiceSettings(state_dir=tmp_path)
    store = LocalObjectStore(settings.resolved_storage_root)
    sink = CollectingDeadLetters()
    task = StreamTask(views[0].topic, 0, views, store, sink, settings)
    if by_hand:
        task.decode = decode_batch
    task.start_at(0)
    for lo in range(0, len(records), 700):
        task.process(records[lo : lo + 700])
    task.flush()
    segments = {}
    for key in store.list("segments/"):
        table = pq.read_table(io.BytesIO(store.get(key)))
        segments[key] = sorted(map(str, table.to_pylist()))
    return task, segments, [(p, d.offset, d.reason, d.detail) for _, p, d in sink.letters]


def test_the_generators_declaration_decodes_as_the_hand_written_decoder(tmp_path):
    options = GeneratorOptions(max_events=4_000, peak_rate=20_000, speedup=60, warmup_events=300)
    messages = synthesize(load_trace("nyc_taxi"), options)
    records = [Rec(i, 1_000 + i, m.value) for i, m in enumerate(messages)]
    views = [  # KLL quantiles compact with coin flips: not bit for bit (test_task_replay)
        v
        for v in load_views(PROJECT_ROOT / "data" / "views.yaml")
        if not v.is_session and all(a.aggregation != "quantiles" for a in v.aggregations)
    ]
    declared_views = [replace(v, declaration=GENERATOR) for v in views]
    plain = _run(tmp_path / "plain", declared_views, records, by_hand=True)
    declared = _run(tmp_path / "declared", declared_views, records)
    assert isinstance(declared[0].decode.func, DeclaredDecoder)
    # a view built without a declaration reads its topic as the topics file declares it
    undeclared = _run(
        tmp_path / "undeclared", [replace(v, declaration=None) for v in views], records
    )
    assert undeclared[0].declaration.columns() == declared[0].declaration.columns()
    assert undeclared[1] == declared[1]
    assert declared[1] == plain[1] and plain[1]
    assert declared[2] == plain[2] and plain[2]  # the generator sends malformed messages
    assert declared[0].watermark == plain[0].watermark


def test_a_nested_topics_columns_reach_its_views(tmp_path):
    declaration = TopicDeclaration(
        topic="payments",
        fields=(
            {"name": "merchant", "type": "string", "path": "merchant.name"},
            {"name": "amount", "type": "long"},
            {"name": "reason", "type": "string", "nullable": True},
        ),
        event_time={"path": "created", "format": "iso8601"},
        record={"key": "card", "offset": "at"},
    )
    (base,) = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if not v.is_session][:1]
    view = replace(base, topic="payments", grouping_cols=(), where=None, declaration=declaration)
    seen = []

    class Spy:
        def __init__(self, state):
            self.state = state

        def update(self, batch):
            seen.append(batch)

        def __getattr__(self, name):
            return getattr(self.state, name)

    settings = SluiceSettings(state_dir=tmp_path)
    task = StreamTask(
        "payments", 3, [view], LocalObjectStore(tmp_path), CollectingDeadLetters(), settings
    )
    task.states = {name: Spy(state) for name, state in task.states.items()}
    task.start_at(0)
    good = {"merchant": {"name": "m1"}, "amount": 5, "created": "2014-07-01T10:00:00+02:00"}
    task.process(
        [
            Rec(0, 1, orjson.dumps(good), b"card-1"),
            Rec(1, 2, orjson.dumps({**good, "amount": "5"})),
            Rec(2, 3, orjson.dumps({**good, "reason": "fraud"}), None),
        ]
    )
    (batch,) = seen
    assert list(batch.columns["merchant"]) == ["m1", "m1"]
    assert list(batch.columns["event_time"]) == [1_404_201_600_000] * 2
    assert list(batch.columns["reason"]) == [None, "fraud"]
    assert list(batch.columns["card"]) == ["card-1", None]
    assert list(batch.columns["at"]) == [0, 2]
    assert task.dead_lettered == {"wrong_type": 1}
