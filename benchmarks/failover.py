"""Failover benchmark: how long a lost agent's tasks wait, and how fast a new agent works.

Runs real `sluice agent` processes on the embedded broker over a pre-produced topic (each
agent rate-capped so the replay lasts the whole run), with the product's defaults for the
heartbeat (1 s) and the loss threshold (``--loss-after``, default 10 s), and measures:

  (a) SIGKILL of an agent (not the coordinator) -> every task it held Running on another
      agent, when nobody but the heartbeat notices (a machine gone): about the loss threshold;
  (b) the same when a supervisor sees the process die and records the loss (and frees its
      lease) at once, what `sluice stream` / `sluice up` do on one machine;
  (c) SIGKILL of the coordinator, heartbeat only: its lease must expire too;
  (d) a spot interruption notice on an agent's instance metadata (IMDSv2, a local server) ->
      every task it held Running on another agent (the agent evacuates itself);
  (e) an agent's registration -> its first processed record, for the first agent of an empty
      fleet and for an agent joining a running one (a checkpoint hand-off first);
  (f) a poison record (a view's update raises on it): its first crash -> its quarantine (the
      crash of the record alone) -> its task processing past it again, on a topic of its own
      per trial with one agent (``--poison-trials``; ``--poison-only`` runs just this).
  (g) a fault during a merge (issue 27): a fleet of four agents on 12 key buckets
      (SLUICE_MAX_BUCKET_FACTOR 4, windowed views only) loses one agent to an operator's
      drain, so the coordinator merges; once a task is stopping for the merge, its owner (every
      other trial: the coordinator) is SIGKILLed and a supervisor records the loss at once.
      Measured: the kill (= the loss detected) -> every task Running on a live agent again.
      Then the fleet is restored (``--only merge`` runs just this).

Times come from the control store's clocks: the job-model history (Running events) and the
task reports (every ``--status-interval`` seconds, the resolution of (c)). Prints the median
and p95 of ``--kills`` trials and writes ``benchmarks/out/failover.json``.

    .venv/bin/python benchmarks/failover.py [--kills 5] [--loss-after 10] [--poison-only | --only merge]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from orchestration.control_plane.fleet.coordinator import COORDINATOR_LEASE  # noqa: E402
from orchestration.control_plane.processes import start_process, stop_process  # noqa: E402
from pipelines.config import PROJECT_ROOT  # noqa: E402
from pipelines.control import ControlStore  # noqa: E402
from pipelines.generator import GeneratorOptions, load_trace, replay  # noqa: E402
from pipelines.kafka import EmbeddedBroker, ensure_topics, producer  # noqa: E402
from tests.fixtures.imds import FakeImds  # noqa: E402 - the local IMDSv2 the tests use

PARTITIONS = 6
TOPIC = "failover-events"


def wait_for(condition, timeout_s: float, what: str, every_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(every_s)
    raise TimeoutError(f"{what} did not happen within {timeout_s:.0f}s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Fleet:
    def __init__(
        self, work: Path, bootstrap: str, views_file: Path, args, name: str = "", **env: str
    ) -> None:
        self.work = work
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SLUICE_CONTROL_STORE_URL": f"sqlite:///{work / f'control{name}.db'}",
            "SLUICE_STORAGE_ROOT": str(work / f"storage{name}"),
            "SLUICE_DEAD_LETTER_TOPIC": f"{TOPIC}.dlq",
            "SLUICE_FLUSH_INTERVAL_S": "2",
            "SLUICE_CHECKPOINT_INTERVAL_S": "2",
            "SLUICE_STATUS_INTERVAL_S": str(args.status_interval),
            "SLUICE_AGENT_LOSS_AFTER_S": str(args.loss_after),
            "SLUICE_WORKER_MAX_RATE": str(args.rate),
            **env,
        }
        self.views_file = views_file
        self.control = ControlStore(self.env["SLUICE_CONTROL_STORE_URL"])
        self.jobs = self.control.jobs
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, agent_id: str, imds: FakeImds | None = None) -> float:
        env = {**self.env, "SLUICE_STATE_DIR": str(self.work / agent_id)}
        if imds is not None:
            env |= {"SLUICE_SPOT_IMDS_URL": imds.url, "SLUICE_SPOT_POLL_INTERVAL_S": "1"}
        command = [sys.executable, "-m", "orchestration.cli", "agent", "--id", agent_id]
        command += ["--topic", TOPIC, "--views", str(self.views_file)]
        self.processes[agent_id] = start_process(command, env, self.work / f"{agent_id}.log")
        return time.time()

    def registered_at(self, agent_id: str, after: float) -> float:
        def registered():
            rows = [a for a in self.jobs.agents() if a.agent_id == agent_id]
            return rows and rows[0].started_at >= after and rows[0].started_at

        return wait_for(registered, 30, f"{agent_id} to register")

    def running_on(self) -> dict[str, str | None]:
        return {
            a.task: a.agent_id if a.state == "Running" else None
            for a in self.jobs.assignments(TOPIC)
        }

    def all_running(self) -> bool:
        owners = self.running_on()
        live = {a for a, p in self.processes.items() if p.poll() is None}
        return len(owners) == PARTITIONS and all(o in live for o in owners.values())

    def first_record_at(self, agent_id: str, after: float) -> float:
        """When a task of ``agent_id`` first reported progress past where it was restored."""
        restored: dict[str, int] = {}

        def progressed():
            for event in self.jobs.events(limit=500):
                if event.agent_id == agent_id and event.state == "Running" and event.at >= after:
                    offset = int(event.reason.rsplit(" ", 1)[-1])
                    restored.setdefault(event.task, offset)
            times = [
                t.heartbeat_at
                for t in self.control.tasks()
                if t.worker_id == agent_id
                and t.task in restored
                and t.next_offset > restored[t.task]
            ]
            return min(times) if times else None

        return wait_for(progressed, 60, f"{agent_id} to process a record")

    def stop(self) -> None:
        for process in self.processes.values():
            stop_process(process, timeout_s=15)
        self.control.close()


def kill_to_running(fleet: Fleet, victim: str, supervised: bool) -> float:
    held = {t for t, owner in fleet.running_on().items() if owner == victim}
    killed = time.time()
    os.kill(fleet.processes[victim].pid, signal.SIGKILL)
    fleet.processes[victim].wait(10)
    if supervised:  # what LocalFleet.supervise does on seeing the process gone
        fleet.jobs.set_agent_state(victim, "lost", "killed by signal 9")
        fleet.jobs.release_lease(COORDINATOR_LEASE, victim)

    def moved():
        owners = fleet.running_on()
        return all(owners[t] not in (None, victim) for t in held)

    wait_for(moved, fleet_loss(fleet) + 60, f"{victim}'s tasks to run elsewhere")
    running_at = max(
        e.at for e in fleet.jobs.events(limit=500) if e.task in held and e.state == "Running"
    )
    return running_at - killed


def notice_to_running(fleet: Fleet, victim: str, imds: FakeImds) -> float:
    held = {t for t, owner in fleet.running_on().items() if owner == victim}
    noticed = time.time()
    imds.interrupt("2099-01-01T00:00:00Z")

    def moved():
        owners = fleet.running_on()
        return all(owners[t] not in (None, victim) for t in held)

    wait_for(moved, 120, f"{victim}'s tasks to run elsewhere after its notice")
    running_at = max(
        e.at for e in fleet.jobs.events(limit=500) if e.task in held and e.state == "Running"
    )
    os.kill(fleet.processes[victim].pid, signal.SIGKILL)  # the instance goes
    fleet.processes[victim].wait(10)
    imds.clear_notices()  # its replacement has no notice
    return running_at - noticed


MERGE_AGENTS = ("m0", "m1", "m2", "m3")
"""Four agents on 6 partitions call for 2 key buckets each; three for whole partitions."""


def merge_fault_trials(work: Path, bootstrap: str, views: dict, args) -> dict[str, list[float]]:
    """(f): per trial, the SIGKILL of the owner of a task stopping for a merge (every other
    trial: of the coordinator) -> every task Running on a live agent again (the loss recorded
    at once, as a supervisor does)."""
    windowed = {"views": [v for v in views["views"] if v.get("kind") != "session"]}
    views_file = work / "views-windowed.yaml"
    views_file.write_text(yaml.safe_dump(windowed))
    fleet = Fleet(
        work,
        bootstrap,
        views_file,
        args,
        "-merge",
        SLUICE_MAX_BUCKET_FACTOR="4",
        SLUICE_BUCKET_MERGE_DELAY_S="1",
    )
    live = lambda: {a for a, p in fleet.processes.items() if p.poll() is None}  # noqa: E731

    def tasks():
        return fleet.jobs.assignments(TOPIC)

    def split_in_two():
        now = tasks()
        return len(now) == 2 * PARTITIONS and all(
            a.state == "Running" and not a.handoff_to and a.agent_id in live() for a in now
        )

    def every_task_running():
        now = tasks()
        return now and all(a.state == "Running" and a.agent_id in live() for a in now)

    results: dict[str, list[float]] = {"owner": [], "leader": []}
    try:
        for agent_id in MERGE_AGENTS:
            fleet.start(agent_id)
        for _ in range(args.kills):
            wait_for(split_in_two, 180, "12 key buckets Running on four agents")
            fleet.jobs.set_agent_state("m3", "draining", "benchmark: scale-in")

            def stopping_for_a_merge():
                owners = [
                    a.agent_id
                    for a in tasks()
                    if a.handoff_to == "@merge" and a.state == "Running" and a.agent_id != "m3"
                ]
                return owners

            owners = wait_for(stopping_for_a_merge, 60, "a task stopping for a merge", 0.01)
            lease = fleet.jobs.lease(COORDINATOR_LEASE)
            leader = lease["holder"] if lease else None
            # every other trial the coordinator dies in the merge instead (if it is not m3)
            trial = len(results["owner"]) + len(results["leader"])
            others = [o for o in owners if o != leader] or owners
            victim = leader if trial % 2 and leader not in (None, "m3") else others[0]
            killed = time.time()
            os.kill(fleet.processes[victim].pid, signal.SIGKILL)
            fleet.processes[victim].wait(10)
            fleet.jobs.set_agent_state(victim, "lost", "killed by signal 9")
            fleet.jobs.release_lease(COORDINATOR_LEASE, victim)
            wait_for(every_task_running, 120, "every task Running after a fault in a merge")
            results["leader" if victim == leader else "owner"].append(time.time() - killed)
            stuck = [a.task for a in tasks() if a.state == "Waiting"]
            assert not stuck, stuck
            fleet.start(victim)
            fleet.jobs.set_agent_state("m3", "running", "benchmark: scale-out")
    finally:
        fleet.stop()
    return results


def fleet_loss(fleet: Fleet) -> float:
    return float(fleet.env["SLUICE_AGENT_LOSS_AFTER_S"])


POISON = "poison-event"


def poison_trial(work: Path, bootstrap: str, trial: int, events: int) -> dict[str, float]:
    """(f) once: a topic of ``events`` with a record ``fails_on`` raises on half way through
    partition 0, one agent; seconds from the first crash to the quarantine and on to the task
    processing past the record (the crash log's and the task reports' clocks)."""
    from tests.fixtures.poison import FailsOn

    topic = f"poison-{trial}"
    ensure_topics(bootstrap, {topic: 2, f"{topic}.dlq": 1})
    out = producer(bootstrap)
    options = GeneratorOptions(seed=100 + trial, max_events=events, peak_rate=40_000)
    messages = []
    replay(load_trace("nyc_taxi"), options, messages.append, pace=False)
    for m in messages[: events // 2]:
        out.send(topic, key=m.key, value=m.value)
    event = json.loads(next(m.value for m in messages if m.kind == "valid"))
    sent = out.send(
        topic, key=b"poison", value=json.dumps({**event, "event_id": POISON}).encode(), partition=0
    ).get(timeout=30)
    for m in messages[events // 2 :]:
        out.send(topic, key=m.key, value=m.value)
    out.flush()
    out.close()
    views = yaml.safe_load((PROJECT_ROOT / "data" / "views.yaml").read_text())
    views["views"].append(
        {
            "name": "fragile",
            "grouping_cols": ["org"],
            "interval": "1h",
            "allowed_lateness": "10m",
            "aggregation_info": [
                {
                    "aggregation": FailsOn.name,
                    "col_name": "event_id",
                    "aggregated_col_name": "events",
                    "params": {"value": POISON},
                }
            ],
        }
    )
    for view in views["views"]:
        view["topic"] = topic
    home = work / topic
    home.mkdir()
    views_file = home / "views.yaml"
    views_file.write_text(yaml.safe_dump(views))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SLUICE_CONTROL_STORE_URL": f"sqlite:///{home / 'control.db'}",
        "SLUICE_STORAGE_ROOT": str(home / "storage"),
        "SLUICE_STATE_DIR": str(home / "state"),
        "SLUICE_DEAD_LETTER_TOPIC": f"{topic}.dlq",
        "SLUICE_STATUS_INTERVAL_S": "0.1",
        "SLUICE_CHECKPOINT_INTERVAL_S": "2",
        "SLUICE_FLUSH_INTERVAL_S": "2",
        "SLUICE_AGGREGATOR_MODULES": "tests.fixtures.poison",
    }
    control = ControlStore(env["SLUICE_CONTROL_STORE_URL"])
    command = [sys.executable, "-m", "orchestration.cli", "agent", "--id", "p0"]
    command += ["--topic", topic, "--views", str(views_file)]
    agent = start_process(command, env, home / "p0.log")
    task = f"{topic}:0"
    try:

        def past_it():
            row = next((t for t in control.tasks() if t.task == task), None)
            return row is not None and row.next_offset > sent.offset and row.heartbeat_at

        processing = wait_for(past_it, 120, f"{task} to process past the poison record")
        crashes = control.crashes.of_task(task)
        assert len(crashes) == 2 and crashes[-1].first_offset == sent.offset, crashes
        assert agent.poll() is None, "the agent exited"
        first, quarantined = crashes[0].at, crashes[1].at
        return {
            "crash_to_quarantine_s": quarantined - first,
            "quarantine_to_processing_s": processing - quarantined,
            "crash_to_processing_s": processing - first,
        }
    finally:
        stop_process(agent, timeout_s=15)
        control.close()


def poison_benchmark(trials: int, events: int) -> dict[str, list[float]]:
    """(f) ``trials`` times, each on its own topic of one broker."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = EmbeddedBroker(work / "broker")
        bootstrap = broker.start().bootstrap
        try:
            runs = [poison_trial(work, bootstrap, i, events) for i in range(trials)]
        finally:
            broker.stop()
    return {key: [r[key] for r in runs] for key in runs[0]}


def print_poison(poison: dict[str, list[float]]) -> None:
    for key, label in (
        ("crash_to_quarantine_s", "poison record: first crash -> quarantined"),
        ("quarantine_to_processing_s", "poison record: quarantined -> its task processing past it"),
        ("crash_to_processing_s", "poison record: first crash -> its task processing past it"),
    ):
        values = poison[key]
        print(
            f"{label}: median {statistics.median(values):.2f} s, "
            f"p95 {percentile(values, 0.95):.2f} s (n={len(values)})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=4, help="trials per kind (default 4)")
    parser.add_argument("--loss-after", type=float, default=10.0, help="loss threshold, s")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="msg/s cap per agent")
    parser.add_argument("--status-interval", type=float, default=0.2)
    parser.add_argument("--poison-trials", type=int, default=5, help="trials of (f)")
    parser.add_argument("--poison-only", action="store_true", help="only (f)")
    parser.add_argument(
        "--only", choices=("all", "merge"), default="all", help="merge: only trials (g)"
    )
    args = parser.parse_args()
    poison = poison_benchmark(args.poison_trials, 20_000) if args.only == "all" else None
    if args.poison_only:
        print_poison(poison)
        return 0
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        broker = EmbeddedBroker(work / "broker")
        bootstrap = broker.start().bootstrap
        fleet = None
        try:
            ensure_topics(bootstrap, {TOPIC: PARTITIONS, f"{TOPIC}.dlq": 1})
            out = producer(bootstrap, max_request_size=4 * 1024 * 1024)
            options = GeneratorOptions(seed=3, max_events=args.events, peak_rate=40_000)
            replay(
                load_trace("nyc_taxi"),
                options,
                lambda m: out.send(TOPIC, key=m.key, value=m.value),
                pace=False,
            )
            out.flush()
            out.close()
            views = yaml.safe_load((PROJECT_ROOT / "data" / "views.yaml").read_text())
            for view in views["views"]:
                view["topic"] = TOPIC
            views_file = work / "views.yaml"
            views_file.write_text(yaml.safe_dump(views))
            results: dict[str, list[float]] = {"merge_owner": [], "merge_leader": []}
            cold, joins = None, []
            if args.only == "merge":
                merges = merge_fault_trials(work, bootstrap, views, args)
                results |= {"merge_owner": merges["owner"], "merge_leader": merges["leader"]}
                return report(args, results, cold, joins, poison)
            fleet = Fleet(work, bootstrap, views_file, args)

            imds = {a: stack.enter_context(FakeImds(a)) for a in ("a0", "a1", "a2")}
            started = fleet.start("a0", imds["a0"])
            registered = fleet.registered_at("a0", started - 1)
            cold = fleet.first_record_at("a0", registered) - registered
            joins = []
            for agent_id in ("a1", "a2"):
                started = fleet.start(agent_id, imds[agent_id])
                registered = fleet.registered_at(agent_id, started - 1)
                joins.append(fleet.first_record_at(agent_id, registered) - registered)
            wait_for(fleet.all_running, 60, "three agents running every task")

            kinds = ("heartbeat", "supervised", "leader", "spot")
            results |= {kind: [] for kind in kinds}
            for trial in range(args.kills * len(kinds)):
                kind = kinds[trial % len(kinds)]
                leader = fleet.jobs.lease(COORDINATOR_LEASE)["holder"]
                holders = sorted(set(fleet.running_on().values()) - {None})
                others = [a for a in holders if a != leader]
                victim = leader if kind == "leader" else others[trial % len(others)]
                if kind == "spot":
                    results[kind].append(notice_to_running(fleet, victim, imds[victim]))
                else:
                    results[kind].append(kill_to_running(fleet, victim, kind == "supervised"))
                started = fleet.start(victim, imds[victim])
                registered = fleet.registered_at(victim, started - 1)
                joins.append(fleet.first_record_at(victim, registered) - registered)
                wait_for(fleet.all_running, 60, "every task running again")
            fleet.stop()
            fleet = None
            merges = merge_fault_trials(work, bootstrap, views, args)
            results |= {"merge_owner": merges["owner"], "merge_leader": merges["leader"]}
        finally:
            if fleet is not None:
                fleet.stop()
            broker.stop()
    return report(args, results, cold, joins, poison)


def report(
    args,
    results: dict[str, list[float]],
    cold: float | None,
    joins: list[float],
    poison: dict[str, list[float]] | None,
) -> int:
    figures = {
        "machine": f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()})",
        "loss_after_s": args.loss_after,
        "kill_to_running_heartbeat_s": results.get("heartbeat", []),
        "kill_to_running_supervised_s": results.get("supervised", []),
        "kill_leader_to_running_s": results.get("leader", []),
        "spot_notice_to_running_s": results.get("spot", []),
        "merge_owner_killed_to_every_task_running_s": results["merge_owner"],
        "merge_leader_killed_to_every_task_running_s": results["merge_leader"],
        "registration_to_first_record_cold_s": cold,
        "registration_to_first_record_join_s": joins,
        "poison": poison,
    }
    print(f"machine: {figures['machine']}; loss threshold {args.loss_after:g} s")
    for kind, label in (
        ("heartbeat", "SIGKILL -> running elsewhere (heartbeat only)"),
        ("supervised", "SIGKILL -> running elsewhere (supervisor saw it)"),
        ("leader", "SIGKILL of the coordinator -> running elsewhere (heartbeat only)"),
        ("spot", "spot interruption notice (IMDS) -> running elsewhere"),
    ):
        values = results.get(kind)
        if not values:
            continue
        print(
            f"{label}: median {statistics.median(values):.2f} s, p95 {percentile(values, 0.95):.2f} s"
            f" (n={len(values)}; {statistics.median(values) / args.loss_after:.2f}x the threshold)"
        )
    for kind, whom in (("merge_owner", "a task's owner"), ("merge_leader", "the coordinator")):
        values = results[kind]
        if values:
            print(
                f"SIGKILL of {whom} during a merge (loss recorded at once) -> every task "
                f"Running: median {statistics.median(values):.2f} s, "
                f"p95 {percentile(values, 0.95):.2f} s (n={len(values)})"
            )
    if cold is not None:
        print(f"registration -> first record, first agent of an empty fleet: {cold:.2f} s")
    if joins:
        print(
            f"registration -> first record, joining a running fleet: median "
            f"{statistics.median(joins):.2f} s, p95 {percentile(joins, 0.95):.2f} s "
            f"(n={len(joins)})"
        )
    if poison is not None:
        print_poison(poison)
    name = "failover-merge.json" if args.only == "merge" else "failover.json"
    target = ROOT / "benchmarks" / "out" / name
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(figures, indent=2))
    print(f"figures in {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
