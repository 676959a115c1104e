"""End to end on the real broker with real worker processes: results equal an oracle computed
from the messages actually in the topic, through crashes (SIGKILL) and graceful restarts."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from pipelines.config import SluiceSettings
from pipelines.control import ControlStore
from pipelines.storage import LocalObjectStore
from pipelines.views.model import WINDOW_START
from tests.fixtures.chaos import CHAOS_SEED, replay_hint
from tests.fixtures.processes import sluice_process, stop_process, wait_until
from tests.fixtures.stream import (
    check_against_oracle,
    make_stream,
    read_records,
    tables_of,
    wait_for_tables,
)
from tests.fixtures.tables import query_realtime

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

PARTITIONS = 4
EVENTS = 200_000


@pytest.fixture(scope="module")
def stream(broker, tmp_path_factory):
    """A topic holding >= 200k generated events with late, duplicate and malformed messages."""
    return make_stream(
        broker.bootstrap, tmp_path_factory.mktemp("views"), "e2e-events", EVENTS, PARTITIONS
    )


class Fleet:
    """Worker processes under test, each on a fixed set of partitions."""

    def __init__(
        self,
        tmp_path: Path,
        bootstrap: str,
        stream: dict,
        assignment: dict[str, list[int]],
        client: str | None = None,
    ):
        self.tmp_path = tmp_path
        self.stream = stream
        self.assignment = assignment
        self.env = {
            "SLUICE_STATE_DIR": str(tmp_path / "state"),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SLUICE_DEAD_LETTER_TOPIC": f"{stream['topic']}.dlq",
            "SLUICE_FLUSH_INTERVAL_S": "1",
            "SLUICE_CHECKPOINT_INTERVAL_S": "1.5",
            "SLUICE_STATUS_INTERVAL_S": "0.3",
            **({"SLUICE_KAFKA_CLIENT": client} if client else {}),
        }
        self.processes = {}
        self.replaced: set[int] = set()
        self.control = ControlStore(f"sqlite:///{tmp_path / 'state' / 'control.db'}")
        self.store = LocalObjectStore(tmp_path / "state" / "storage")

    def start(self, worker: str) -> None:
        tasks = ",".join(f"{self.stream['topic']}:{p}" for p in self.assignment[worker])
        args = [
            "worker",
            "--id",
            worker,
            "--tasks",
            tasks,
            "--views",
            str(self.stream["views_file"]),
        ]
        if worker in self.processes:
            self.replaced.add(self.processes[worker].pid)
        self.processes[worker] = sluice_process(args, self.env, self.tmp_path / f"{worker}.log")

    def consumed(self) -> int:
        return sum(t.consumed for t in self.control.tasks())

    def caught_up(self) -> bool:
        """Every partition reported at its end, and not by a process this fleet replaced (a
        killed worker's last report stays in the control store and says nothing of the
        process restarted in its place)."""
        tasks = {t.partition: t for t in self.control.tasks() if t.pid not in self.replaced}
        return len(tasks) == PARTITIONS and all(
            tasks[p].next_offset >= end for p, end in self.stream["ends"].items()
        )

    def at_end(self, worker: str) -> bool:
        """The current process of ``worker`` has reported each of its partitions at its end."""
        pid = self.processes[worker].pid
        tasks = {t.partition: t for t in self.control.tasks() if t.pid == pid}
        return set(tasks) == set(self.assignment[worker]) and all(
            tasks[p].next_offset >= self.stream["ends"][p] for p in tasks
        )

    def reporting(self, worker: str) -> bool:
        """The current process of ``worker`` has reported its tasks."""
        pid = self.processes[worker].pid
        return {t.partition for t in self.control.tasks() if t.pid == pid} == set(
            self.assignment[worker]
        )

    def served(self) -> dict[str, dict[tuple, int]]:
        """What the windowed views that count events serve now: events per (window, group)."""
        out = {}
        for view in self.stream["views"]:
            if view.is_session or "events" not in view.output_schema().names:
                continue
            rows = query_realtime(self.store, view).to_pylist()
            keys = [WINDOW_START, *view.grouping_cols]
            out[view.name] = {tuple(r[k] for k in keys): r["events"] for r in rows}
        assert out, "no view counts events"
        return out

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes.values())

    def stop_all(self) -> dict[str, int]:
        return {w: stop_process(p, signal.SIGTERM) for w, p in self.processes.items()}

    def check_against_oracle(self) -> None:
        check_against_oracle(self.stream, self.store, self.control)


SPREAD_SPEEDUP = 2_880
"""Simulated seconds per second of the chaos stream's replay: its events span about a day of
event time (the default's span about an hour), so a partition held back lags by hours."""


@pytest.fixture(scope="module")
def spread_stream(broker, tmp_path_factory):
    """The chaos test's own topic: events from the chaos seed, spread over a day."""
    return make_stream(
        broker.bootstrap,
        tmp_path_factory.mktemp("views"),
        "e2e-spread",
        EVENTS,
        PARTITIONS,
        seed=CHAOS_SEED,
        rate=(40_000, SPREAD_SPEEDUP),
    )


@pytest.fixture
def fleet_factory(tmp_path, broker, request):
    """Fleets on the module's stream, or the one given (``on``)."""
    fleets = []

    def make(assignment, client=None, on=None):
        on = on if on is not None else request.getfixturevalue("stream")
        fleet = Fleet(tmp_path, broker.bootstrap, on, assignment, client)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.stop_all()
        fleet.control.close()


def _dead_letter_keys(bootstrap: str, topic: str) -> set[bytes]:
    return {r.key for r in read_records(bootstrap, topic, 1)[0]}


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_two_workers_match_the_oracle(fleet_factory, stream, broker, client):
    """On each client the worker can read with (SLUICE_KAFKA_CLIENT)."""
    fleet = fleet_factory({"w0": [0, 2], "w1": [1, 3]}, client)
    fleet.start("w0")
    fleet.start("w1")
    wait_until(lambda: fleet.caught_up() or not fleet.alive(), 240, "workers to catch up")
    assert fleet.alive(), "a worker died"
    assert fleet.stop_all() == {"w0": 0, "w1": 0}
    fleet.check_against_oracle()
    dead_letters = _dead_letter_keys(broker.bootstrap, f"{stream['topic']}.dlq")
    assert len(dead_letters) == stream["report"].malformed_total


class Publishing:
    """``sluice tables publish --follow`` beside the fleet, in its own process as an agent
    fleet's leader runs the publisher: ``sluice worker`` processes have no leader to run it."""

    PASS = re.compile(r"published .* in ([\d.]+) s \(([\d.]+) s CPU\)")

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.tables = tables_of(fleet.env)
        self.log = fleet.tmp_path / "publish.log"
        self.process = None

    def summary(self) -> str:
        """The passes that committed and the slowest one's wall and CPU seconds (what a slow
        wait for the tables should be read against)."""
        passes = [(float(w), float(c)) for w, c in self.PASS.findall(self.log.read_text())]
        if not passes:
            return "no pass committed yet"
        wall, cpu = max(passes)
        return f"{len(passes)} passes committed, slowest {wall:.1f} s ({cpu:.1f} s CPU)"

    def __enter__(self) -> Publishing:
        args = ["tables", "publish", "--follow", "--views", str(self.fleet.stream["views_file"])]
        self.process = sluice_process(args, self.fleet.env, self.log)
        return self

    def stop(self) -> int:
        """SIGTERM: the publisher ends its pass, runs a last one and exits."""
        return stop_process(self.process, signal.SIGTERM, timeout_s=60)

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.tables.close()


def test_sigkill_three_times_loses_nothing_and_counts_nothing_twice(
    fleet_factory, spread_stream, chaos_rng
):
    """With librdkafka (confluent-kafka) reading: restarts resume exactly from checkpoints. A
    publisher commits the flushed hours to the views' tables throughout; the second victim is
    restarted only once the other worker read an eighth of the topic on: over the day of
    event time the stream spans, the hours its partitions fill on restart were published
    short hours before the newest. Within a minute, a flush and a publish interval of
    catch-up the tables equal the oracle too."""
    rng = chaos_rng
    stream = spread_stream
    fleet = fleet_factory({"w0": [0, 2], "w1": [1, 3]}, "confluent", stream)
    fleet.env["SLUICE_PUBLISH_INTERVAL_S"] = "2"
    with Publishing(fleet) as publishing:
        fleet.start("w0")
        fleet.start("w1")
        for low, high in ((0.10, 0.30), (0.35, 0.60), (0.65, 0.90)):
            target = int(EVENTS * rng.uniform(low, high))
            wait_until(
                lambda t=target: fleet.consumed() >= t or fleet.caught_up(),
                240,
                f"{target} consumed",
            )
            victim = rng.choice(["w0", "w1"])
            stop_process(fleet.processes[victim], signal.SIGKILL, timeout_s=10)
            if low == 0.35:  # restarted late: its partitions lag while the other's hours publish
                survivor = "w1" if victim == "w0" else "w0"
                before = fleet.consumed()
                wait_until(
                    lambda b=before, s=survivor: (
                        fleet.consumed() >= b + EVENTS // 8 or fleet.at_end(s)
                    ),
                    240,
                    f"{survivor} to read on while {victim} is down",
                )
            fleet.start(victim)  # restarts from its last checkpoint
        wait_until(
            lambda: fleet.caught_up() or not fleet.alive(), 240, "workers to catch up after crashes"
        )
        caught_up_at = time.monotonic()
        assert fleet.alive(), "a worker died"
        took = wait_for_tables(stream, publishing.tables, fleet.env, caught_up_at)
        print(
            f"tables equal the oracle {took:.1f} s after catch-up ({replay_hint()}; "
            f"publisher: {publishing.summary()})"
        )
        assert fleet.stop_all() == {"w0": 0, "w1": 0}
        assert publishing.stop() == 0  # its last pass after the workers' final flushes
        assert "Traceback" not in publishing.log.read_text()
        wait_for_tables(stream, publishing.tables, fleet.env)
    fleet.check_against_oracle()


def test_a_worker_stopped_while_it_replays_leaves_the_served_views_as_they_were(
    fleet_factory, stream
):
    """A worker killed after it flushed beyond its checkpoint replays on restart; stopped
    before it gets back there, it must not have rewritten the files with less than they held:
    what is served never goes back. Then it catches up and the views equal the oracle."""
    fleet = fleet_factory({"w0": [0, 2], "w1": [1, 3]}, "confluent")
    fleet.env["SLUICE_CHECKPOINT_INTERVAL_S"] = "600"  # flushes every second, no checkpoint
    fleet.start("w0")
    fleet.start("w1")
    wait_until(lambda: fleet.caught_up() or not fleet.alive(), 240, "workers to catch up")
    before = fleet.served()
    stop_process(fleet.processes["w0"], signal.SIGKILL, timeout_s=10)
    fleet.env["SLUICE_WORKER_MAX_RATE"] = "2000"  # so that the replay is stopped part-way
    fleet.start("w0")
    wait_until(lambda: fleet.reporting("w0"), 60, "the restarted worker to report")
    assert stop_process(fleet.processes["w0"], signal.SIGTERM) == 0
    replayed = {t.partition: t.next_offset for t in fleet.control.tasks()}
    assert any(replayed[p] < fleet.stream["ends"][p] for p in (0, 2)), "nothing was replayed"
    after = fleet.served()
    for name, rows in before.items():
        lower = {
            k: (n, after[name].get(k, 0)) for k, n in rows.items() if after[name].get(k, 0) < n
        }
        assert not lower, f"{name}: {len(lower)} groups went back, e.g. {list(lower.items())[:3]}"
    del fleet.env["SLUICE_WORKER_MAX_RATE"]
    fleet.start("w0")
    wait_until(lambda: fleet.caught_up() or not fleet.alive(), 240, "w0 to catch up again")
    assert fleet.stop_all() == {"w0": 0, "w1": 0}
    fleet.check_against_oracle()


def test_graceful_stop_resumes_from_the_checkpoint(fleet_factory, stream):
    fleet = fleet_factory({"w0": [0, 1, 2, 3]})
    # capped, so that the stop lands part-way: uncapped, the worker read the whole topic between
    # the report that showed a third consumed and the signal (seen in CI)
    fleet.env["SLUICE_WORKER_MAX_RATE"] = "10000"
    fleet.start("w0")
    wait_until(lambda: fleet.consumed() >= EVENTS // 3, 240, "a third consumed")
    assert stop_process(fleet.processes["w0"], signal.SIGTERM) == 0
    stopped = {t.partition: t for t in fleet.control.tasks()}
    assert all(t.state == "stopped" for t in stopped.values())
    assert all(t.checkpointed_offset == t.next_offset for t in stopped.values())
    assert sum(t.consumed for t in stopped.values()) < EVENTS
    del fleet.env["SLUICE_WORKER_MAX_RATE"]
    fleet.start("w0")
    wait_until(
        lambda: fleet.caught_up() or not fleet.alive(), 240, "the restarted worker to catch up"
    )
    assert fleet.stop_all() == {"w0": 0}
    # graceful stop: the final checkpoint was exact, so nothing was consumed twice
    assert fleet.consumed() == EVENTS
    fleet.check_against_oracle()


def test_rescale_hands_tasks_over_through_checkpoints(tmp_path, broker, stream):
    """Guardian's path: a scaling request in the control store, the supervisor starts agents
    and waits for them to register, the coordinator hands tasks over to them through
    checkpoints; nothing is lost or counted twice."""
    import threading

    from orchestration.control_plane.autoscaling.realizers import ControlStoreRealizer
    from orchestration.control_plane.fleet import LocalFleet, ScaleWatcher
    from orchestration.control_plane.runtime import Runtime
    from pipelines.config import KafkaSettings

    checker = Fleet(tmp_path, broker.bootstrap, stream, {})
    runtime = Runtime(SluiceSettings(state_dir=tmp_path / "state"), KafkaSettings())
    fleet = LocalFleet(
        ["a0"],
        topic=stream["topic"],
        views_file=stream["views_file"],
        env=checker.env,
        log_dir=tmp_path / "logs",
        control=runtime.control,
    )
    tables = tables_of(checker.env)
    fleet.start()
    try:
        scaler = ScaleWatcher(runtime, fleet, stream["topic"], every_s=0)
        wait_until(lambda: checker.consumed() >= EVENTS // 4, 240, "a quarter consumed")
        realizer = ControlStoreRealizer(
            runtime.control, stream["topic"], timeout_s=120, policy="test"
        )
        outcome: dict = {}
        request = threading.Thread(
            target=lambda: outcome.update(after=realizer.apply(3, "test step"))
        )
        request.start()
        while request.is_alive():
            scaler.check()
            fleet.supervise()
            request.join(0.2)
        assert outcome == {"after": 3}
        assert sorted(fleet.agents) == ["a0", "a1", "a2"]
        assert all(a.alive() for a in fleet.agents.values())
        registered = {a.agent_id for a in runtime.control.jobs.agents() if a.state == "running"}
        assert registered == {"a0", "a1", "a2"}  # awaited before the request was applied

        def balanced_and_caught_up():
            owners = {t.partition: t.worker_id for t in checker.control.tasks()}
            return checker.caught_up() and len(set(owners.values())) == 3

        wait_until(balanced_and_caught_up, 240, "the rescaled fleet to balance and catch up")
        caught_up_at = time.monotonic()
        handoffs = [e for e in runtime.control.jobs.events() if "hand-off" in e.reason]
        assert handoffs, "tasks moved without a checkpoint hand-off"
        # the leader's publisher (the catalog in the control store, the warehouse the storage)
        took = wait_for_tables(stream, tables, checker.env, caught_up_at)
        print(f"tables equal the oracle {took:.1f} s after catch-up")
    finally:
        fleet.stop()
    try:
        wait_for_tables(stream, tables, checker.env)  # the stop's last flushes and pass
    finally:
        tables.close()
    assert checker.consumed() == EVENTS  # graceful hand-off: nothing read twice
    checker.check_against_oracle()
    checker.control.close()
