"""The archive buffer streams events to the encoding thread as row groups; its files must hold
exactly the rows a range owns, per event-time hour, in offset order, whatever the row groups."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.archive import ArchiveBuffer
from pipelines.archive import writer as archive_writer
from pipelines.events.decode import DeadLetter, DecodedBatch
from pipelines.exceptions import StorageError
from pipelines.segments import HOUR_MS, read_range_records
from pipelines.storage import LocalObjectStore
from pipelines.views.topics import declaration_for, default_declarations

TOPIC = "events"
FIRST = 60_000  # a virtual task's ranges are cut at the aligned offset 65,536
BASE = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS
GENERATOR = declaration_for(TOPIC, default_declarations())


def _batches(rng: np.random.Generator, start: int, n_batches: int, size: int) -> list[DecodedBatch]:
    """Batches of a partition from ``start`` (offsets with gaps, as a bucket's are), event
    times over three hours, one dead letter after each batch's events."""
    out = []
    offset = start
    for _ in range(n_batches):
        offsets = offset + np.cumsum(rng.integers(1, 3, size))
        times = BASE + rng.integers(0, 3 * HOUR_MS, size)
        ids = offsets.tolist()
        columns = {
            "event_id": np.array([f"e-{o}" for o in ids], dtype=object),
            "event_time": times.astype(np.int64),
            "org": np.array([f"org-{o % 7}" for o in ids], dtype=object),
            "client": np.array([f"c-{o % 31}" for o in ids], dtype=object),
            "bytes_tx": rng.integers(0, 10**6, size).astype(np.int64),
            "session_id": np.array([f"s-{o % 97}" for o in ids], dtype=object),
            "event_type": np.array(["view", "error"], dtype=object)[offsets % 2],
        }
        bad = ids[-1] + 1
        offset = bad + 1
        out.append(
            DecodedBatch(
                offsets=offsets.astype(np.int64),
                kafka_timestamps=times.astype(np.int64),
                columns=columns,
                prior_watermark=np.zeros(size, dtype=np.int64),
                dead_letters=[DeadLetter(bad, BASE, "malformed_json", "bad", b"{")],
                consumed=size + 1,
                next_offset=offset,
            )
        )
    return out


def _rows(batches: list[DecodedBatch]) -> list[dict]:
    """Every event as a row, read off the batches one by one (not by the buffer's code)."""
    rows = []
    for b in batches:
        for i in range(len(b)):
            row = {name: b.columns[name][i] for name in b.columns}
            rows.append({**row, "offset": b.offsets[i]})
    return [{k: v.item() if hasattr(v, "item") else v for k, v in r.items()} for r in rows]


class _FailingOnce(LocalObjectStore):
    """A store whose first put of an events file fails, as a storage outage would."""

    failed = False

    def put(self, key: str, data: bytes) -> None:
        if key.startswith("archive/events/") and not self.failed:
            self.failed = True
            raise StorageError("the store is away")
        super().put(key, data)


@pytest.mark.parametrize("factor", [1, 2])
def test_streamed_files_hold_each_range_and_hour_rows_once_in_offset_order(
    tmp_path, monkeypatch, factor
):
    monkeypatch.setattr(archive_writer, "ROW_GROUP_ROWS", 700)
    rng = np.random.default_rng(factor)
    store = _FailingOnce(tmp_path)
    buffer = ArchiveBuffer(TOPIC, 3, FIRST, bucket=factor - 1, factor=factor, declaration=GENERATOR)
    first = _batches(rng, FIRST, 9, 400)
    flushes = [first, _batches(rng, first[-1].next_offset, 4, 300)]
    for batches in flushes:
        for b in batches:
            buffer.add(b)
        if store.failed is False:  # the first write fails; the next one stores it all
            with pytest.raises(StorageError):
                buffer.write(store)
        buffer.write(store)

    every = _rows([b for batches in flushes for b in batches])
    letters = [d.offset for batches in flushes for b in batches for d in b.dead_letters]
    records = read_range_records(store, TOPIC)
    assert records[0].first == FIRST
    assert records[-1].end == flushes[-1][-1].next_offset
    assert all(a.end == b.first for a, b in itertools.pairwise(records))
    if factor > 1:  # cut at the aligned offset
        assert any(r.end == archive_writer.ALIGN_OFFSETS for r in records)
    else:
        assert len(records) == 2  # one range per flush
    archived: list[int] = []
    streamed = 0
    for record in records:
        for key in record.files:
            if not key.startswith("archive/events/"):
                continue
            file = pq.ParquetFile(io.BytesIO(store.get(key)))
            streamed += file.num_row_groups > 1
            table = file.read()
            hour = key.split("/")[2].removeprefix("hour=")
            times = table.column("event_time").to_numpy()
            hour_ms = int(times[0] - times[0] % HOUR_MS)
            expected = [
                r
                for r in every
                if record.first <= r["offset"] < record.end
                and hour_ms <= r["event_time"] < hour_ms + HOUR_MS
            ]
            assert table.select(list(expected[0])).to_pylist() == expected
            assert record.events[hour] == len(expected)
            assert set(table.column("topic").to_pylist()) == {TOPIC}
            assert set(table.column("partition").to_pylist()) == {3}
            archived += [r["offset"] for r in expected]
        in_range = [o for o in letters if record.first <= o < record.end]
        assert sum(record.dead_letters.values()) == len(in_range)
    assert sorted(archived) == sorted(r["offset"] for r in every), "an event lost or twice"
    assert streamed, "no file was written in several row groups"
