"""The shipped example of a topic of one's own (data/flights.yaml, data/flights.jsonl.gz): the
file parses, every message decodes with the declared decoder to what a plain reading of the
JSON says (the standard ``json`` module and the declaration's paths), and its views validate."""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pytest
import yaml

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.events.declaration import EVENT_TIME, ColumnType, TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import NO_WATERMARK
from pipelines.views.loader import check_views, read_views_document

DATA = PROJECT_ROOT / "data"
VIEWS = DATA / "flights.yaml"
FILE = DATA / "flights.jsonl.gz"


@dataclass
class Rec:
    offset: int
    value: bytes | None
    timestamp: int = 0


def _declaration() -> TopicDeclaration:
    """Read as the model accepts it, independent of what the archive can hold yet."""
    (entry,) = yaml.safe_load(VIEWS.read_text())["topics"]
    return TopicDeclaration.model_validate(entry)


def _lines() -> list[bytes]:
    with gzip.open(FILE, "rb") as handle:
        return [line.rstrip(b"\n") for line in handle]


def _at(message, path: str):
    for step in path.split("."):
        message = None if message is None else message.get(step)
    return message


def test_the_file_is_small_json_lines_of_objects_in_event_time_order() -> None:
    assert FILE.stat().st_size < 1_000_000
    lines = _lines()
    assert 1_000 <= len(lines) <= 20_000
    messages = [json.loads(line) for line in lines]
    assert all(isinstance(m, dict) for m in messages)
    times = [datetime.fromisoformat(m["departure"]["scheduled"]) for m in messages]
    assert all(t.utcoffset() is not None for t in times)
    assert times == sorted(times)
    # the shape the example shows: nulls in each nullable field, doubles, nested objects
    for path in ("flight.tailnum", "departure.delay_min", "arrival.delay_min", "air_time_min"):
        assert any(_at(m, path) is None for m in messages), path
    assert all(isinstance(m["route"]["distance"], int) for m in messages)
    assert any(isinstance(m["departure"]["delay_min"], float) for m in messages)


def test_every_message_decodes_with_the_declaration_as_plain_json_reads_it() -> None:
    declaration = _declaration()
    assert declaration.id is None and declaration.nullable_columns()
    lines = _lines()
    batch = decoder_for(declaration)(
        [Rec(i, line, i) for i, line in enumerate(lines)],
        NO_WATERMARK,
        max_message_bytes=4096,
        # nights without flights last 5 h: under the default 6 h a stream task accepts
        max_future_ms=int(SluiceSettings().max_future_s * 1000),
    )
    assert batch.dead_letters == []
    assert len(batch) == len(lines)
    messages = [json.loads(line) for line in lines]
    path = declaration.event_time.path
    expected_times = [
        int(datetime.fromisoformat(_at(m, path)).timestamp() * 1000) for m in messages
    ]
    assert batch.columns[EVENT_TIME].tolist() == expected_times
    for f in declaration.fields:
        expected = [_at(m, f.path or f.name) for m in messages]
        column = batch.columns[f.name]
        if f.type is ColumnType.STRING:
            assert column.tolist() == expected, f.name
            continue
        nulls = batch.nulls.get(f.name, np.zeros(len(column), dtype=bool))
        assert nulls.tolist() == [v is None for v in expected], f.name
        assert [None if n else v for n, v in zip(nulls, column.tolist(), strict=True)] == [
            None if v is None else v for v in expected
        ], f.name
        assert column.dtype == (np.int64 if f.type is ColumnType.LONG else np.float64), f.name


def test_the_example_views_validate_against_their_own_declaration() -> None:
    """Needs the archive and the correction to hold a declared topic (nullable columns, no id,
    columns of its own): until then ``pipelines.archive.declared.unsupported`` refuses it."""
    views, problems = check_views(read_views_document(VIEWS))
    assert [p.line(str(VIEWS)) for p in problems] == []
    assert {v.topic for v in views} == {"flights"}
    assert all(v.declaration == _declaration() for v in views)


def _builder():
    spec = importlib.util.spec_from_file_location(
        "build_flights", PROJECT_ROOT / "scripts" / "build_flights.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (
            {"dep_delay": "2", "arr_delay": "11", "air_time": "227", "tailnum": "N14228"},
            {"tailnum": "N14228", "dep": 2.0, "arr": 11.0, "air": 227.0},
        ),
        (  # cancelled: the source leaves its delays, air time and plane as NA
            {"dep_delay": "NA", "arr_delay": "NA", "air_time": "NA", "tailnum": "NA"},
            {"tailnum": None, "dep": None, "arr": None, "air": None},
        ),
    ],
)
def test_the_builder_writes_a_source_row_as_a_nested_message_with_nulls(cells, expected) -> None:
    row = {
        "year": "2013",
        "month": "7",
        "day": "1",
        "hour": "5",
        "minute": "15",
        "carrier": "UA",
        "flight": "1545",
        "origin": "EWR",
        "dest": "IAH",
        "distance": "1400",
        **cells,
    }
    assert _builder().message(row) == {
        "flight": {"carrier": "UA", "number": 1545, "tailnum": expected["tailnum"]},
        "route": {"origin": "EWR", "dest": "IAH", "distance": 1400},
        # July: New York is on daylight time, four hours behind UTC
        "departure": {"scheduled": "2013-07-01T05:15:00-04:00", "delay_min": expected["dep"]},
        "arrival": {"delay_min": expected["arr"]},
        "air_time_min": expected["air"],
    }


@pytest.mark.parametrize("seed", range(3))
def test_split_across_partitions_every_message_decodes_within_a_day_ahead(seed) -> None:
    """A partition's nights are longer than the topic's (its last evening flight may be hours
    before the topic's): `up --replay` takes events a day ahead of a task's watermark."""
    from orchestration.cli.up import REPLAY_MAX_FUTURE_S

    rng = np.random.default_rng(seed)
    lines = _lines()
    partition_of = rng.integers(0, 4, size=len(lines))
    decoder = decoder_for(_declaration())
    decoded = 0
    for p in range(4):
        mine = [line for line, q in zip(lines, partition_of, strict=True) if q == p]
        batch = decoder(
            [Rec(i, line, i) for i, line in enumerate(mine)],
            NO_WATERMARK,
            max_message_bytes=4096,
            max_future_ms=int(REPLAY_MAX_FUTURE_S * 1000),
        )
        assert batch.dead_letters == []
        decoded += len(batch)
    assert decoded == len(lines)
