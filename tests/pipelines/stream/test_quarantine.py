"""A record that crashes a task: the crash is logged, the task restarts from its checkpoint and
takes the crashed range one record at a time, and the record that crashes it again is
quarantined (dead-lettered as ``crashed_task``) while everything else is processed.

The loop below does what a worker and its agent do on a crash (drop the task, log the crash
with the offsets being processed, start it again with the task's crashes), on a real
control store (SQLite) and real storage; the oracle counts the records themselves.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import orjson
import pytest

import tests.fixtures.poison  # noqa: F401  (registers fails_on)
from pipelines.config import SluiceSettings
from pipelines.control import ControlStore, TaskCrash, crash_plan
from pipelines.events.decode import CRASHED_TASK
from pipelines.exceptions import ViewCrash
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.storage import LocalObjectStore
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters
from pipelines.views import parse_views

BATCH = 250


@dataclass
class Rec:
    offset: int
    timestamp: int
    value: bytes


def _views(poison: str = "poison-event"):
    base = {"topic": "events", "interval": "1h", "allowed_lateness": "10m"}
    return parse_views(
        [
            {
                **base,
                "name": "counts",
                "grouping_cols": ["org"],
                "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
            },
            {
                **base,
                "name": "fragile",
                "grouping_cols": ["org"],
                "aggregation_info": [
                    {
                        "aggregation": "fails_on",
                        "col_name": "event_id",
                        "aggregated_col_name": "n",
                        "params": {"value": poison},
                    }
                ],
            },
        ]
    )


def _records(poison_at: list[int], total: int = 2_000) -> list[Rec]:
    options = GeneratorOptions(max_events=total, peak_rate=20_000, speedup=60, warmup_events=0)
    records = []
    for i, message in enumerate(synthesize(load_trace("nyc_taxi"), options)):
        value = message.value
        if i in poison_at:
            event = orjson.loads(value) if message.kind == "valid" else None
            if event is None:  # make it a valid event so only the view can fail on it
                event = orjson.loads(records[0].value)
            value = orjson.dumps({**event, "event_id": "poison-event"})
        records.append(Rec(i, 1_000 + i, value))
    return records


class Fleet:
    """A worker and its agent around one task: restart after a crash, as they do."""

    def __init__(self, tmp_path, views, records) -> None:
        self.store = LocalObjectStore(tmp_path / "storage")
        self.control = ControlStore(f"sqlite:///{tmp_path}/control.db")
        self.sink = CollectingDeadLetters()
        self.views = views
        self.records = records
        self.crashes: list[TaskCrash] = []
        self.quarantine_runs: list[int] = []

    def start(self) -> StreamTask:
        task = StreamTask("events", 0, self.views, self.store, self.sink, SluiceSettings())
        if task.restore() is None:
            task.start_at(0)
        task.guard(crash_plan(self.control.crashes.of_task(task.name)))
        return task

    def run(
        self, checkpoint_every: int = 3, max_starts: int = 10, batch: int = BATCH
    ) -> StreamTask:
        for _ in range(max_starts):
            task = self.start()
            try:
                n = 0
                while task.next_offset < len(self.records):
                    first = task.next_offset
                    task.process(self.records[first : first + batch])
                    n += 1
                    if n % checkpoint_every == 0:
                        task.checkpoint()
                task.checkpoint()
                return task
            except Exception as exc:  # the worker's _crash and the agent's _record_crash
                cause = exc.cause if isinstance(exc, ViewCrash) else exc
                first, end, stamp = task.processing
                crash = TaskCrash(
                    task.name,
                    first,
                    end,
                    traceback.format_exception_only(cause)[-1].strip(),
                    getattr(exc, "view", None),
                    stamp,
                )
                self.control.crashes.record(crash)
                self.crashes.append(crash)
        raise AssertionError(f"the task never finished: crashes {self.crashes}")


def _valid(records: list[Rec]) -> list[dict]:
    """The oracle: every record that is a valid event, read independently of the decoder."""
    out = []
    for r in records:
        try:
            event = orjson.loads(r.value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and all(
            isinstance(event.get(k), str) and event.get(k) for k in ("event_id", "org")
        ):
            out.append(event)
    return out


def test_a_record_that_crashes_a_view_is_quarantined_and_the_rest_processed(tmp_path) -> None:
    poison = 1_111
    records = _records([poison])
    fleet = Fleet(tmp_path, _views(), records)
    task = fleet.run()

    # crash -> isolate -> quarantine: the batch, then the record alone, then no more crashes
    assert [(c.first_offset, c.end_offset, c.view) for c in fleet.crashes] == [
        (1_000, 1_250, "fragile"),
        (poison, poison + 1, "fragile"),
    ]
    assert "PoisonedRecord: event_id is 'poison-event'" in fleet.crashes[-1].error
    quarantined = [d for _, _, d in fleet.sink.letters if d.reason == CRASHED_TASK]
    assert [d.offset for d in quarantined] == [poison]
    assert "view fragile" in quarantined[0].detail and "PoisonedRecord" in quarantined[0].detail
    assert quarantined[0].value == records[poison].value
    # the rest is processed: the views counted every valid event but the poisoned one
    others = [d for _, _, d in fleet.sink.letters if d.reason != CRASHED_TASK]
    expected = len(_valid(records)) - 1 - sum(1 for d in others if d.reason != "future_event_time")
    assert task.consumed == len(records)
    for name, c in task.view_counters().items():
        assert c["consumed"] == c["processed"] + c["dead_lettered"] + c["dropped_late"], name
    assert task.dead_lettered[CRASHED_TASK] == 1
    assert task.status("w", len(records)).views["quarantined"] == 1
    assert task.states["counts"].processed + task.states["counts"].late >= expected - 5
    assert not task.plan  # past the crashes: back on the whole-batch path


def test_the_counts_are_those_of_the_stream_without_the_poisoned_record(tmp_path) -> None:
    """Against a run that never met the poison (the record left out of its input)."""
    poison = 777
    records = _records([poison])
    poisoned = Fleet(tmp_path / "a", _views(), records).run()
    kept = [r for r in records if r.offset != poison]
    clean_records = [Rec(i, r.timestamp, r.value) for i, r in enumerate(kept)]
    clean = Fleet(tmp_path / "b", _views(), clean_records).run()
    for name in ("counts", "fragile"):
        got = {k: dict(v) for k, v in poisoned.states[name].buckets.items()}
        want = {k: dict(v) for k, v in clean.states[name].buckets.items()}
        assert got.keys() == want.keys()
    assert poisoned.states["counts"].processed == clean.states["counts"].processed
    assert poisoned.consumed == clean.consumed + 1
    assert poisoned.total_dead_lettered == clean.total_dead_lettered + 1


@pytest.mark.parametrize(("stamp", "skipped"), [(1_350, [350]), (99, [])])
def test_a_quarantine_needs_the_same_record(tmp_path, stamp, skipped) -> None:
    """A crash logged for an offset whose record has another Kafka timestamp (a recreated
    topic) does not quarantine the new record there."""
    records = _records([])
    fleet = Fleet(tmp_path, _views(), records)
    fleet.control.crashes.record(TaskCrash("events:0", 300, 400, "E: x", "fragile"))
    fleet.control.crashes.record(TaskCrash("events:0", 350, 351, "E: x", "fragile", stamp))
    task = fleet.run()
    assert [d.offset for _, _, d in fleet.sink.letters if d.reason == CRASHED_TASK] == skipped
    assert task.consumed == len(records)


def test_a_crash_explained_by_a_quarantine_does_not_count_toward_disabling(tmp_path) -> None:
    control = ControlStore(f"sqlite:///{tmp_path}/control.db")
    log = control.crashes
    log.record(TaskCrash("t", 0, 500, "E: a", "v"))
    assert log.verdict("t", "v", 600).counted != ()  # not explained yet: it counts
    log.record(TaskCrash("t", 42, 43, "E: a", "v", 7))
    verdict = log.verdict("t", "v", 600)
    assert verdict.counted == () and verdict.quarantines == 1
    assert not control.jobs.record_view_crash(
        "t", "v", "E: a", 1, 600, counted=verdict.counted, at_fault=False
    )
    assert control.jobs.disabled_views("t") == set()
    log.record(TaskCrash("t", 600, 700, "E: b", "v"))  # not explained: it counts
    assert len(log.verdict("t", "v", 600).counted) == 1


def test_a_view_that_fails_on_every_record_is_disabled_after_the_limit(tmp_path) -> None:
    """Not one quarantine per record for ever: more quarantines than the crash limit mean
    the view is at fault."""
    limit = 3
    fleet = Fleet(tmp_path, _views("*"), _records([], total=600))
    jobs, log = fleet.control.jobs, fleet.control.crashes
    disabled = False
    for _ in range(3 * limit):
        try:
            task = fleet.start()
            task.process(fleet.records[task.next_offset : task.next_offset + BATCH])
            task.checkpoint()
            continue
        except ViewCrash as exc:
            first, end, stamp = task.processing
            log.record(TaskCrash(task.name, first, end, str(exc.cause), exc.view, stamp))
            verdict = log.verdict(task.name, exc.view, 600)
            disabled = jobs.record_view_crash(
                task.name,
                exc.view,
                str(exc),
                limit,
                600,
                counted=verdict.counted,
                at_fault=verdict.quarantines > limit,
            )
            if disabled:
                break
    assert disabled
    assert jobs.disabled_views("events:0") == {"fragile"}
    assert log.verdict("events:0", "fragile", 600).quarantines == limit + 1
    assert "quarantined" in jobs.view_states("events:0")[0].reason
    # re-enabled by an operator: its crashes are forgotten, it does not count them again
    assert jobs.enable_view("events:0", "fragile", "fixed")
    verdict = log.verdict("events:0", "fragile", 600)
    assert verdict.counted == () and verdict.quarantines == 0


@pytest.mark.parametrize(
    ("crashes", "suspects", "quarantined"),
    [
        ([], (), []),
        ([(0, 10)], ((0, 10),), []),
        ([(0, 10), (3, 4)], (), [3]),  # explained by the quarantine: whole batches again
        ([(3, 4)], ((3, 4),), []),  # a batch of one record crashed once: suspect only
        ([(3, 4), (3, 4)], (), [3]),
        ([(0, 10), (12, 20), (15, 16)], ((0, 10),), [15]),
        ([(0, 10), (5, 15)], ((0, 15),), []),
    ],
)
def test_crash_plan(crashes, suspects, quarantined) -> None:
    plan = crash_plan([TaskCrash("t", a, b, "E", record_ts=7) for a, b in crashes])
    assert plan.suspects == suspects
    assert sorted(plan.quarantined) == quarantined


def test_a_dead_letter_keeps_at_most_a_bounded_part_of_a_huge_message() -> None:
    """Else a quarantined record near the producer's request size could not be dead-lettered,
    and the failure would crash its task again on every replay."""
    from pipelines.events.decode import DeadLetter
    from pipelines.stream.dead_letters import VALUE_MAX_BYTES, dead_letter_message

    huge = b"x" * (4 << 20)
    _, value = dead_letter_message("events", 0, DeadLetter(5, 1, CRASHED_TASK, "d", huge))
    assert len(value) < 2 * VALUE_MAX_BYTES
    assert orjson.loads(value)["value_bytes"] == len(huge)
    _, small = dead_letter_message("events", 0, DeadLetter(5, 1, CRASHED_TASK, "d", b"{}"))
    assert "value_bytes" not in orjson.loads(small)


def test_two_bad_records_in_one_batch_are_each_quarantined(tmp_path) -> None:
    """After the first quarantine the batch's other records go as one batch again; the
    second bad record crashes it anew and is isolated and quarantined in turn."""
    records = _records([1_100, 1_180])
    fleet = Fleet(tmp_path, _views(), records)
    task = fleet.run()
    assert [(c.first_offset, c.end_offset) for c in fleet.crashes] == [
        (1_000, 1_250),
        (1_100, 1_101),
        (1_101, 1_250),
        (1_180, 1_181),
    ]
    quarantined = {d.offset for _, _, d in fleet.sink.letters if d.reason == CRASHED_TASK}
    assert quarantined == {1_100, 1_180}  # sent again by each replay: at least once, same key
    assert task.dead_lettered[CRASHED_TASK] == 2
    assert task.consumed == len(records)
    for name, c in task.view_counters().items():
        assert c["consumed"] == c["processed"] + c["dead_lettered"] + c["dropped_late"], name


def test_a_batch_of_one_record_that_crashed_is_not_what_quarantines_it() -> None:
    """A poll that returned one record crashes without its timestamp; the record processed
    alone then crashes with it, and that crash is the quarantine (matched on it)."""
    plan = crash_plan([TaskCrash("t", 3, 4, "E"), TaskCrash("t", 3, 4, "E", record_ts=1_003)])
    assert plan.quarantined[3].record_ts == 1_003 and plan.suspects == ()
    assert not crash_plan([TaskCrash("t", 3, 4, "E"), TaskCrash("t", 3, 4, "E")]).quarantined


def test_a_record_polled_alone_is_quarantined_too(tmp_path) -> None:
    """Batches of one record (the tail of a stream): the first crash has no timestamp, the
    isolated one has, and the record is quarantined after the two."""
    records = _records([5], total=20)
    fleet = Fleet(tmp_path, _views(), records)
    task = fleet.run(batch=1)
    assert [(c.first_offset, c.end_offset, c.record_ts) for c in fleet.crashes] == [
        (5, 6, None),
        (5, 6, records[5].timestamp),
    ]
    assert task.dead_lettered[CRASHED_TASK] == 1 and task.consumed == 20


def test_the_newest_crash_of_an_offset_is_the_quarantine() -> None:
    """An old quarantine at this offset was another record's (a recreated topic): the crash of
    the record there now decides."""
    crashes = [
        TaskCrash("t", 0, 10, "E", record_ts=None),
        TaskCrash("t", 3, 4, "E", record_ts=111),
        TaskCrash("t", 0, 10, "E", record_ts=None),
        TaskCrash("t", 3, 4, "E", record_ts=222),
    ]
    assert crash_plan(crashes).quarantined[3].record_ts == 222
