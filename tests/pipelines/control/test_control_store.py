"""The control store behaves the same on SQLite (one machine) and a real PostgreSQL server.

Every test runs against both backends (the ``control_url`` fixture); the concurrent-writer
test is what a fleet of agents on several machines does to one shared store.
"""

from __future__ import annotations

import threading

from pipelines.control import ControlStore, FleetSample, TaskStatus

DAY = 86_400.0


def _status(task: int, worker: str, consumed: int, now: float) -> TaskStatus:
    return TaskStatus(
        task=f"events:{task}",
        topic="events",
        partition=task,
        worker_id=worker,
        pid=100 + task,
        consumed=consumed,
        next_offset=consumed,
        end_offset=consumed + 5,
        backlog=5,
        heartbeat_at=now,
    )


def test_task_reports_upsert_by_task(control_url: str) -> None:
    store = ControlStore(control_url)
    try:
        store.report_tasks([_status(0, "w0", 10, 1.0), _status(1, "w0", 20, 1.0)])
        store.report_tasks([_status(0, "w1", 15, 2.0)])  # the task moved to another worker
        tasks = {t.task: t for t in store.tasks()}
        assert set(tasks) == {"events:0", "events:1"}
        assert (tasks["events:0"].worker_id, tasks["events:0"].consumed) == ("w1", 15)
        assert tasks["events:1"].consumed == 20
    finally:
        store.close()


def test_deployments_scaling_and_samples(control_url: str) -> None:
    store = ControlStore(control_url)
    try:
        definition = {"name": "v", "topic": "events"}
        assert store.deploy_view("v", "fp1", definition) is True
        assert store.deploy_view("v", "fp1", definition) is False
        store.set_view_state("v", "Disabled")
        (deployed,) = store.deployed_views()
        assert (deployed["state"], deployed["definition"]) == ("Disabled", definition)

        store.record_applied("events", 2)
        store.request_workers("events", 4, "backlog", "ds2")
        scaling = store.scaling("events")
        assert (scaling["desired_workers"], scaling["applied_workers"]) == (4, 2)
        assert scaling["policy"] == "ds2"

        for i in range(3):
            store.record_fleet_sample(
                FleetSample(i * DAY, "events", 2, 4, 10, 1.5, 1_000 * (i + 1), 100),
                retain_s=1.5 * DAY,
            )
        kept = store.fleet_samples("events", 0, 10_000)
        assert [s.sampled_at for s in kept] == [DAY, 2 * DAY]
    finally:
        store.close()


def test_rate_history_keeps_a_minutes_newest_and_prunes(control_url: str) -> None:
    store = ControlStore(control_url)
    try:
        store.record_rate("events", 60.0, {"rate": 1})
        store.record_rate("events", 90.0, {"rate": 2})  # same minute: the newest wins
        store.record_rate("events", 9 * DAY, {"rate": 3}, retain_s=8 * DAY)
        assert store.rate_history("events", 0, 10 * DAY) == [{"rate": 3}]
        store.record_rate("events", 9 * DAY + 60, {"rate": 4})
        assert store.rate_history("events", 0, 10 * DAY) == [{"rate": 3}, {"rate": 4}]
    finally:
        store.close()


def test_concurrent_writers_of_the_same_rows_do_not_race(control_url: str) -> None:
    """Agents on several machines heartbeat and report the same rows at once."""
    errors: list[BaseException] = []

    def agent(worker: str) -> None:
        store = ControlStore(control_url)
        try:
            for round_ in range(25):
                store.report_tasks([_status(p, worker, round_, float(round_)) for p in range(4)])
                store.report_worker(worker, 1, [f"events:{p}" for p in range(4)], "running")
                store.record_rate("events", 60.0 * round_, {"worker": worker})
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    ControlStore(control_url).close()  # create the schema once, before the writers race
    threads = [threading.Thread(target=agent, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    store = ControlStore(control_url)
    try:
        assert {t.task for t in store.tasks()} == {f"events:{p}" for p in range(4)}
        assert {t.consumed for t in store.tasks()} == {24}
        assert len(store.workers()) == 4
        assert len(store.rate_history("events", 0, 60.0 * 25)) == 25
    finally:
        store.close()


def test_input_ends_are_recorded_cleared_and_reached_only_through_a_checkpoint(
    control_url: str,
) -> None:
    store = ControlStore(control_url)
    try:
        assert store.input_ends.of_topic("events") is None
        store.input_ends.record("events", {0: 120, 1: 80}, at=5.0)
        store.input_ends.record("other", {0: 7})
        end = store.input_ends.of_topic("events")
        assert end is not None and dict(end.end_offsets) == {0: 120, 1: 80}
        assert end.recorded_at == 5.0

        def task(partition: int, checkpointed: int | None, seen_end: int) -> TaskStatus:
            return TaskStatus(
                task=f"events:{partition}",
                topic="events",
                partition=partition,
                worker_id="w0",
                pid=1,
                next_offset=seen_end,
                end_offset=seen_end,
                checkpointed_offset=checkpointed,
            )

        assert end.reached_by([task(0, 120, 120), task(1, 80, 80)])
        assert not end.reached_by([task(0, 120, 120), task(1, 79, 80)])  # not yet durable
        assert not end.reached_by([task(0, 120, 120), task(1, None, 80)])
        assert not end.reached_by([task(0, 120, 120)])  # partition 1 has no task
        assert not end.reached_by([task(0, 125, 125), task(1, 80, 80)])  # input went on
        assert not end.reached_by([])
        assert end.awaits_checkpoint(1, 80, 79) and end.awaits_checkpoint(0, 121, None)
        assert not end.awaits_checkpoint(1, 79, None)  # not read to the end yet
        assert not end.awaits_checkpoint(1, 80, 80)  # checkpointed through it
        assert not end.awaits_checkpoint(2, 500, None)  # no end recorded for the partition

        store.input_ends.record("events", {0: 130, 1: 80}, at=6.0)  # a second replay's end
        assert dict(store.input_ends.of_topic("events").end_offsets) == {0: 130, 1: 80}
        store.input_ends.clear("events")  # a replay started: the input is open
        assert store.input_ends.of_topic("events") is None
        assert store.input_ends.of_topic("other") is not None
    finally:
        store.close()
