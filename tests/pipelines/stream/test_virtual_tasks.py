"""Virtual tasks (key buckets): the buckets of a split partition the parent's records, split and
merge carry state without losing or double-counting anything, and a task that ran as a
partition, then as two buckets at different speeds, then merged, serves what an oracle computed
from the records with the same documented rules gives."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
import xxhash
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.generator import GeneratorOptions, load_trace, synthesize
from pipelines.segments import read_parquet, state_column
from pipelines.storage import LocalObjectStore
from pipelines.stream import TaskId
from pipelines.stream.buckets import children, key_hashes, parent
from pipelines.stream.checkpoint import load_checkpoint
from pipelines.stream.rebucket import RebucketError, merge_tasks, split_task
from pipelines.stream.task import StreamTask
from pipelines.testing import CollectingDeadLetters, Record
from pipelines.views import load_views
from pipelines.views.loader import parse_views
from pipelines.views.model import WINDOW_START, View
from quality.lineage import check_nothing_lost
from tests.fixtures.oracle import Truth, compare_view
from tests.fixtures.tables import query_realtime

FACTORS = [1, 2, 4, 8, 16, 32]
DEFAULTS = SluiceSettings()
LIMITS = (DEFAULTS.max_message_bytes, int(DEFAULTS.max_future_s * 1000))


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.binary(max_size=12)), min_size=1, max_size=200),
    factor=st.sampled_from(FACTORS),
    data=st.data(),
)
def test_the_buckets_of_a_split_partition_the_parents_records(keys, factor, data):
    offsets = list(range(1000, 1000 + len(keys)))
    hashes = key_hashes(keys, offsets)
    bucket = data.draw(st.integers(0, factor - 1))
    mine = {o for o, h in zip(offsets, hashes, strict=True) if h % factor == bucket}
    (b0, f2), (b1, _) = children(bucket, factor)
    low = {o for o, h in zip(offsets, hashes, strict=True) if h % f2 == b0}
    high = {o for o, h in zip(offsets, hashes, strict=True) if h % f2 == b1}
    assert low | high == mine and not low & high
    assert parent(b0, f2) == parent(b1, f2) == (bucket, factor)
    for key, offset, h in zip(keys, offsets, hashes, strict=True):  # the documented hash
        assert int(h) == (xxhash.xxh64_intdigest(key) if key is not None else offset)


def test_a_task_name_carries_its_bucket():
    assert str(TaskId("events", 3)) == "events:3"
    assert TaskId.parse("events:3#5/8") == TaskId("events", 3, 5, 8)
    assert TaskId.parse("my:topic:3") == TaskId("my:topic", 3)
    for bad in ("events:3#5/6", "events:3#8/8", "events", "events:x"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            TaskId.parse(bad)


def _records(n: int, seed: int, peak_rate: float = 20_000, speedup: float = 60) -> list[Record]:
    options = GeneratorOptions(
        seed=seed,
        max_events=n,
        peak_rate=peak_rate,
        speedup=speedup,
        warmup_events=500,
        late_share=0.05,
        duplicate_share=0.02,
        malformed_share=0.01,
    )
    messages = synthesize(load_trace("nyc_taxi"), options)
    return [Record(i, 1_000 + i, m.key, m.value) for i, m in enumerate(messages)]


RECORDS = _records(9_000, 3)
VIEWS = [v for v in load_views(PROJECT_ROOT / "data" / "views.yaml") if not v.is_session]


def _tight_views() -> list[View]:
    """The example windowed views with no allowed lateness: every one drops hundreds of
    the generator's late events, so where a split falls would show in what is dropped."""
    example = PROJECT_ROOT / "data" / "views.yaml"
    document = yaml.safe_load(example.read_text())
    document["views"] = [v for v in document["views"] if v.get("kind") != "session"]
    for view in document["views"]:
        view["allowed_lateness"] = "0s"
    return parse_views(document, source=str(example))


TIGHT = _tight_views()


def _task(store, sink, tmp_path, task: TaskId, views: list[View] = VIEWS) -> StreamTask:
    settings = SluiceSettings(state_dir=tmp_path)
    t = StreamTask(task.topic, task.partition, views, store, sink, settings, 0, None, *task.where)
    if t.restore() is None:
        t.start_at(0)
    return t


def _run(task: StreamTask, records: list[Record], batch: int = 700) -> None:
    for i in range(0, len(records), batch):
        task.process(records[i : i + batch])
    task.checkpoint()


def _served(store) -> dict[str, list]:
    return {v.name: query_realtime(store, v).to_pylist() for v in VIEWS}


@settings(max_examples=5, deadline=None)
@given(n=st.integers(50, 2_500), depth=st.integers(1, 3))
def test_merge_of_split_is_the_state(tmp_path_factory, n, depth):
    """Split a checkpointed task ``depth`` times, merge everything back: the state, the
    counters and what the query serves are the parent's."""
    store = LocalObjectStore(tmp_path_factory.mktemp("store"))
    sink = CollectingDeadLetters()
    root = TaskId("events", 0)
    _run(_task(store, sink, tmp_path_factory.mktemp("s"), root), RECORDS[:n])
    before = load_checkpoint(store, "events", 0)
    served = _served(store)
    leaves = [root]
    for _ in range(depth):
        leaves = [child for t in leaves for child in split_task(store, VIEWS, "org", t)]
    assert _served(store) == served  # the children's files replace the parent's
    assert sum(load_checkpoint(store, t.topic, 0, *t.where).consumed for t in leaves) == n
    while len(leaves) > 1:
        leaves = sorted(leaves, key=lambda t: t.bucket)
        half = len(leaves) // 2
        leaves = [merge_tasks(store, VIEWS, leaves[i], leaves[i + half]) for i in range(half)]
    assert leaves == [root]
    after = load_checkpoint(store, "events", 0)
    assert (after.next_offset, after.watermark, after.consumed, after.skips) == (
        before.next_offset,
        before.watermark,
        before.consumed,
        (),
    )
    assert after.dead_lettered == before.dead_lettered and after.views == before.views
    assert after.type_errors == before.type_errors
    for view in VIEWS:
        assert _results(view, after.states[view.name]) == _results(view, before.states[view.name])
    assert _served(store) == served


def _results(view, state: bytes) -> dict[tuple, list]:
    """Each row's keys and its aggregations' results (a sketch's bytes need not round-trip)."""
    rows = read_parquet(state).to_pylist()
    keys = [WINDOW_START, *view.grouping_cols]
    return {
        tuple(row[k] for k in keys): [
            agg.result(agg.deserialize(row[state_column(agg.out)])) for agg in view.aggregators
        ]
        for row in rows
    }


def test_split_then_uneven_children_then_merge_equal_the_oracle(tmp_path):
    """A partition runs whole to offset 2500, splits; bucket 0 gets to 5000 and bucket 1 to
    7000; they merge at 5000 with bucket 1's records up to 7000 skipped, and the merged task
    reads to the end. Served windows, late drops and dead letters equal the oracle's of the
    whole partition."""
    store = LocalObjectStore(tmp_path / "store")
    sink = CollectingDeadLetters()
    whole = _task(store, sink, tmp_path, TaskId("events", 0))
    _run(whole, RECORDS[:2500])
    low_id, high_id = split_task(store, VIEWS, "org", whole.id)
    low, high = (_task(store, sink, tmp_path, t) for t in (low_id, high_id))
    assert low.next_offset == high.next_offset == 2500
    _run(low, RECORDS[2500:5000], batch=333)
    _run(high, RECORDS[2500:7000], batch=1000)
    assert 0 < low.kept < low.seen == 2500 and 0 < high.kept < high.seen == 4500
    keyed = [v for v in VIEWS if "org" in v.grouping_cols]
    assert keyed
    for view in keyed:  # a view grouped by the key field holds each org in one bucket only
        low_cp, high_cp = (load_checkpoint(store, "events", 0, *t.where) for t in (low_id, high_id))
        orgs = [
            {row["org"] for row in read_parquet(c.states[view.name]).to_pylist()}
            for c in (low_cp, high_cp)
        ]
        assert orgs[0] and orgs[1] and not orgs[0] & orgs[1], view.name
    merged_id = merge_tasks(store, VIEWS, low_id, high_id)
    merged = _task(store, sink, tmp_path, merged_id)
    assert (merged.next_offset, merged.skips) == (5000, ((1, 2, 7000),))
    _run(merged, RECORDS[5000:])

    truth = Truth(VIEWS)  # the partition's watermark, as if it had been one task throughout
    truth.add_partition([r.value for r in RECORDS], *LIMITS)
    assert truth.late and truth.dead  # the replay has both, so both paths ran
    problems = []
    for view in VIEWS:
        rows = query_realtime(store, view).to_pylist()
        problems += compare_view(view, rows, truth.expected(view))
    assert not problems, "\n".join(problems[:20])
    counters = merged.view_counters()
    assert {v.name: counters[v.name]["dropped_late"] for v in VIEWS} == {
        v.name: truth.late[v.name] for v in VIEWS
    }
    assert merged.consumed == len(RECORDS)
    offsets = sorted(letter.offset for _, _, letter in sink.letters)
    assert len(offsets) == len(set(offsets)) == truth.dead  # each dead letter sent once
    per_field = Counter((d.field, d.reason) for _, _, d in sink.letters if d.field is not None)
    assert per_field  # the generator's hostile values name their fields
    assert (
        merged.type_errors.counts["dead_lettered"] == per_field
    )  # the split kept, the merge summed
    lineage = check_nothing_lost(store, topic="events")
    assert lineage and all(hour.passed for hour in lineage), [h.failures for h in lineage]


def test_a_partition_with_session_state_is_not_split(tmp_path):
    store = LocalObjectStore(tmp_path / "store")
    views = load_views(PROJECT_ROOT / "data" / "views.yaml")
    task = StreamTask(
        "events", 0, views, store, CollectingDeadLetters(), SluiceSettings(state_dir=tmp_path)
    )
    task.restore()
    task.start_at(0)
    _run(task, RECORDS[:1000])
    try:
        split_task(store, views, "org", task.id)
    except RebucketError as exc:
        assert "session" in str(exc)
    else:
        raise AssertionError("a task with a session view was split")


def test_a_checkpoint_written_before_buckets_loads_as_the_whole_partition(tmp_path):
    """Format 1 without bucket, factor and skips in its header (every checkpoint before
    virtual tasks) restores as bucket 0 of 1 with nothing to skip."""
    import json

    import pyarrow as pa

    from pipelines.segments import checkpoint_key, to_parquet

    store = LocalObjectStore(tmp_path / "store")
    task = _task(store, CollectingDeadLetters(), tmp_path, TaskId("events", 0))
    _run(task, RECORDS[:800])
    key = checkpoint_key("events", 0, 0)
    table = read_parquet(store.get(key))
    header = json.loads(table.schema.metadata[b"sluice_checkpoint"])
    for name in ("bucket", "factor", "skips"):
        del header[name]
    old = table.replace_schema_metadata({"sluice_checkpoint": json.dumps(header)})
    store.put(key, to_parquet(pa.table(old.columns, schema=old.schema)))
    restored = load_checkpoint(store, "events", 0)
    assert (restored.bucket, restored.factor, restored.skips) == (0, 1, ())
    again = _task(store, CollectingDeadLetters(), tmp_path, TaskId("events", 0))
    assert again.next_offset == 800 and not again.filters


def _advance(store, sink, tmp_path, task: TaskId, to: int, rng) -> None:
    """Restore ``task`` from its checkpoint, read up to offset ``to`` in random batches (some
    starting before its offset, as a reader shared with a sibling behind it hands them) and
    checkpoint it."""
    t = _task(store, sink, tmp_path, task, TIGHT)
    at = t.next_offset
    while at < to:
        end = min(to, at + rng.randint(1, 900))
        first = max(0, at - rng.choice([0, 0, 0, rng.randint(1, 300)]))
        t.process(RECORDS[first:end])
        at = end
    t.checkpoint()


def _schedule(store, sink, tmp_path, seed: int) -> tuple[list[TaskId], Counter]:
    """Run the partition under a random schedule of splits (up to factor 4) and merges at
    random offsets, the tasks reading at their own pace between them; the tasks at the end
    and how many splits and merges were done."""
    rng = random.Random(seed)
    n = len(RECORDS)
    root = TaskId("events", 0)
    _advance(store, sink, tmp_path, root, rng.randint(0, n // 4), rng)
    tasks = [root]
    done: Counter = Counter()
    for _ in range(rng.randint(4, 9)):
        task = rng.choice(tasks)
        offset = load_checkpoint(store, "events", 0, *task.where).next_offset
        _advance(store, sink, tmp_path, task, min(n, offset + rng.randint(0, n // 5)), rng)
        siblings = [
            (a, b)
            for a in tasks
            for b in tasks
            if a.factor == b.factor > 1 and b.bucket == a.bucket + a.factor // 2
        ]
        if siblings and (task.factor == 4 or rng.random() < 0.4):
            a, b = rng.choice(siblings)
            tasks = [t for t in tasks if t not in (a, b)] + [merge_tasks(store, TIGHT, a, b)]
            done["merge"] += 1
        elif task.factor < 4:
            tasks = [t for t in tasks if t != task] + list(split_task(store, TIGHT, "org", task))
            done["split"] += 1
    for task in tasks:
        _advance(store, sink, tmp_path, task, n, rng)
    return tasks, done


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_splits_and_merges_change_no_result(tmp_path, seed):
    """The partition read by one task, and by tasks split and merged at random offsets, serve
    the same windows and drop the same late events per view: exactly what the oracle of the
    partition's own watermark gives, with events really dropped late."""
    whole_store = LocalObjectStore(tmp_path / "whole")
    whole_sink = CollectingDeadLetters()
    _advance(
        whole_store, whole_sink, tmp_path / "w", TaskId("events", 0), len(RECORDS), random.Random()
    )
    store = LocalObjectStore(tmp_path / "split")
    sink = CollectingDeadLetters()
    tasks, done = _schedule(store, sink, tmp_path / "s", seed)
    assert done["split"] and done["merge"], done

    truth = Truth(TIGHT)
    truth.add_partition([r.value for r in RECORDS], *LIMITS)
    assert all(truth.late[v.name] for v in TIGHT), truth.late  # every view drops some
    checkpoints = [load_checkpoint(store, "events", 0, *t.where) for t in tasks]
    late = {v.name: sum(c.views[v.name]["late"] for c in checkpoints) for v in TIGHT}
    assert late == {v.name: truth.late[v.name] for v in TIGHT}
    whole = load_checkpoint(whole_store, "events", 0)
    assert {v.name: whole.views[v.name]["late"] for v in TIGHT} == late
    assert sum(c.consumed for c in checkpoints) == whole.consumed == len(RECORDS)
    problems = []
    for view in TIGHT:
        rows = query_realtime(store, view).to_pylist()
        problems += compare_view(view, rows, truth.expected(view))
        assert _by_group(view, rows) == _by_group(view, query_realtime(whole_store, view))
    assert not problems, "\n".join(problems[:20])
    offsets = sorted(letter.offset for _, _, letter in sink.letters)
    assert len(offsets) == len(set(offsets)) == truth.dead
    assert offsets == sorted(letter.offset for _, _, letter in whole_sink.letters)
    assert {c.watermark for c in checkpoints} == {whole.watermark}


def _by_group(view, rows) -> dict[tuple, dict]:
    """Served rows by (window, groups), the exact aggregations' values (a sketch's bytes may
    depend on the order its partials were merged in)."""
    if not isinstance(rows, list):
        rows = rows.to_pylist()
    exact = [
        s.aggregated_col_name
        for s in view.aggregations
        if s.aggregation not in ("approx_count_distinct", "theta_distinct", "quantiles")
    ]
    keys = [WINDOW_START, *view.grouping_cols]
    return {tuple(r[k] for k in keys): {c: r[c] for c in exact} for r in rows}


def test_a_bucket_taking_records_one_at_a_time_keeps_the_partitions_watermark(tmp_path):
    """A bucket restarted after crashes reads the offsets they covered one record at a time
    (:class:`CrashPlan`): its watermark still follows every record, its sibling's too, so the
    two buckets drop exactly what the whole partition drops, and end at its watermark."""
    from pipelines.control.crashes import CrashPlan

    n = 4_000
    whole = _task(
        LocalObjectStore(tmp_path / "w"),
        CollectingDeadLetters(),
        tmp_path,
        TaskId("events", 0),
        TIGHT,
    )
    store = LocalObjectStore(tmp_path / "s")
    low, high = (
        _task(store, CollectingDeadLetters(), tmp_path, TaskId("events", 0, b, 2), TIGHT)
        for b in (0, 1)
    )
    low.guard(CrashPlan(suspects=((300, 1_700),)))
    for i in range(0, n, 500):
        for task in (whole, low, high):
            task.process(RECORDS[i : i + 500])
    assert not low.plan  # past the crashes: back on the whole-batch path
    assert low.watermark == high.watermark == whole.watermark
    truth = Truth(TIGHT)
    truth.add_partition([r.value for r in RECORDS[:n]], *LIMITS)
    for view in TIGHT:
        assert low.states[view.name].late + high.states[view.name].late == truth.late[view.name]
        assert whole.states[view.name].late == truth.late[view.name]
    assert low.consumed + high.consumed == whole.consumed == n


def _oracle_problems(store, views: list[View], records: list[Record]) -> list[str]:
    """How the served views differ from the oracle of the partition's ``records`` (read as one
    task with the partition's watermark would read them)."""
    truth = Truth(views)
    truth.add_partition([r.value for r in records], *LIMITS)
    return [
        problem
        for view in views
        for problem in compare_view(
            view, query_realtime(store, view).to_pylist(), truth.expected(view)
        )
    ]


HOURS = _records(9_000, 5, peak_rate=400, speedup=600)
"""Events over about ten hours of event time: an owner that reads on past its checkpoint
writes realtime files of hours its checkpoint's state never held."""


def _die_ahead(store, sink, tmp_path, task: TaskId, to: int) -> None:
    """An owner of ``task`` reads from its checkpoint to ``to``, flushes (realtime files and
    archive ranges past the checkpoint) and dies before its next checkpoint."""
    owner = _task(store, sink, tmp_path, task, TIGHT)
    owner.process(HOURS[owner.next_offset : to])
    owner.flush()


def _advance_hours(store, sink, tmp_path, task: TaskId, to: int) -> None:
    t = _task(store, sink, tmp_path, task, TIGHT)
    for i in range(t.next_offset, to, 700):
        t.process(HOURS[i : min(to, i + 700)])
    t.checkpoint()


def test_an_owner_that_died_past_its_checkpoint_makes_no_split_or_merge_count_twice(tmp_path):
    """Before a split, and again before a merge, the task's owner flushed past its checkpoint
    and died: the new tasks count those records again from the checkpoint, so the files the
    dead owner wrote past it must go with the rewrite. Served windows (a sliding view's too),
    late drops and the archive equal what one whole task gives."""
    whole_store = LocalObjectStore(tmp_path / "whole")
    _advance_hours(whole_store, CollectingDeadLetters(), tmp_path / "w", TaskId("events", 0), 9_000)
    store = LocalObjectStore(tmp_path / "split")
    sink = CollectingDeadLetters()
    root = TaskId("events", 0)
    _advance_hours(store, sink, tmp_path / "s", root, 1500)
    _die_ahead(store, sink, tmp_path / "s", root, 4500)
    low_id, high_id = split_task(store, TIGHT, "org", root)
    _advance_hours(store, sink, tmp_path / "s", low_id, 4000)
    _advance_hours(store, sink, tmp_path / "s", high_id, 5000)
    _die_ahead(store, sink, tmp_path / "s", low_id, 8000)
    # bucket 1 is an hour ahead in event time: an hour it closed would open
    # again under the merged task's watermark, so the merge waits until bucket 0 catches up
    before = {t: load_checkpoint(store, "events", 0, *t.where) for t in (low_id, high_id)}
    with pytest.raises(RebucketError, match=r"ahead in event time .* view traffic_by_org"):
        merge_tasks(store, TIGHT, low_id, high_id)
    assert load_checkpoint(store, "events", 0).next_offset == 1500  # no merged checkpoint
    assert {t: load_checkpoint(store, "events", 0, *t.where) for t in before} == before
    # bucket 0's next owner catches up from its checkpoint, holding the dead owner's files
    # until its replay passes them: a merge waits for that too
    _advance_hours(store, sink, tmp_path / "s", low_id, 5000)
    with pytest.raises(RebucketError, match="written past its checkpoint"):
        merge_tasks(store, TIGHT, low_id, high_id)
    _advance_hours(store, sink, tmp_path / "s", low_id, 8200)
    _advance_hours(store, sink, tmp_path / "s", high_id, 8200)
    merged = merge_tasks(store, TIGHT, low_id, high_id)
    _advance_hours(store, sink, tmp_path / "s", merged, 9_000)

    problems = _oracle_problems(store, TIGHT, HOURS)
    assert not problems, "\n".join(problems[:20])
    for view in TIGHT:
        assert _by_group(view, query_realtime(store, view)) == _by_group(
            view, query_realtime(whole_store, view)
        )
    lineage = check_nothing_lost(store, topic="events")
    assert lineage and all(hour.passed for hour in lineage), [h.failures for h in lineage][:3]


def test_a_bucket_made_again_below_where_it_was_keeps_what_it_had_archived(tmp_path):
    """Bucket 1 runs ahead to 7000 while bucket 0 is at 3000; they merge at 3000 (bucket 1's
    records up to 7000 skipped) and split again at once: the new bucket 1, at 3000 under
    the old one's name, must not take the old one's archive ranges up to 7000 for its own
    uncommitted ones. Nothing is lost or archived twice, and the views equal the oracle."""
    store = LocalObjectStore(tmp_path / "store")
    sink = CollectingDeadLetters()
    rng = random.Random(3)
    root = TaskId("events", 0)
    _advance(store, sink, tmp_path, root, 2000, rng)
    low_id, high_id = split_task(store, TIGHT, "org", root)
    _advance(store, sink, tmp_path, low_id, 3000, rng)
    for to in (4000, 5500, 7000):  # archive ranges from 4000 on: past where it is made again
        _advance(store, sink, tmp_path, high_id, to, rng)
    merged = merge_tasks(store, TIGHT, low_id, high_id)
    assert load_checkpoint(store, "events", 0).skips == ((1, 2, 7000),)
    low_id, high_id = split_task(store, TIGHT, "org", merged)
    for task in (low_id, high_id):
        _advance(store, sink, tmp_path, task, len(RECORDS), rng)

    lineage = check_nothing_lost(store, topic="events")
    assert lineage and all(hour.passed for hour in lineage), [h.failures for h in lineage][:3]
    problems = _oracle_problems(store, TIGHT, RECORDS)
    assert not problems, "\n".join(problems[:20])
