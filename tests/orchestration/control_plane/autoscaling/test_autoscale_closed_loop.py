"""The autoscaler closed around a live fleet (issue 4, "How it is tested", live; issue 14, step 3).

A `sluice stream` supervisor runs one rate-capped worker (``SLUICE_WORKER_MAX_RATE``) on a
6-partition topic of the real broker. A producer thread sends a low rate, then a load step
that one worker cannot carry, then the low rate again. The test ticks the real `autoscaler`
sensor every 2 s with its default policy, the `mcts` planner (its time settings compressed to
the test's seconds), and executes each scaling run it requests in process; the supervisor
carries the runs out. It asserts the fleet scales up, the time lag returns under the SLA while
the step is still on, the fleet scales back down after it, and every message produced was
consumed exactly once across the rescales. It counts the sensor's decisions and measures each
rescale's pause from the control store's job events (first task stopped to the last moved task
running again).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import dagster as dg
import orjson
import pytest
import yaml
from closed_loop_settings import AUTOSCALE_ENV, SLA_S

from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.lag import newest_produced_timestamps, task_lags
from orchestration.jobs.correction import scale_stream_workers
from orchestration.resources.control import LocalControlStoreResource
from orchestration.resources.fleet import LocalFleetResource
from orchestration.sensors import autoscaler as autoscaler_sensor
from orchestration.sensors.autoscaler import make_autoscaling_sensor
from pipelines.control import ControlStore, JobEvent
from pipelines.kafka import ensure_topics, producer
from pipelines.settings import load_settings
from tests.fixtures.processes import sluice_process, stop_process, wait_until
from tests.fixtures.stream import read_partitions

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

PARTITIONS = 6
WORKER_MAX_RATE = 500  # msg/s per worker: one carries LOW_RATE, not STEP_RATE; three drain it
LOW_RATE = 60
STEP_RATE = 700
TICK_S = 2.0
HOLD_S = 10.0
"""How long the test keeps ticking at the low rate after the scale-down (10 minutes of
production time, 3-4 decisions once the new fleet reports): the planner must not bring
workers back."""
RESCALE_PAUSE_BOUND_S = 60.0
"""A rescale's pause (first task stopped to the last moved task running) must stay under this:
within the 90 s the scaling run waits for the new fleet."""
MAX_RESCALES = 4
"""Up and back down, in at most two moves each (1 -> 2 -> 3, 3 -> 2 -> 1): more is flapping."""


class PacedProducer(threading.Thread):
    """Sends valid events round-robin over the partitions at ``rate`` msg/s (changeable)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = 0.0
        self.sent = 0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        out = producer(self.bootstrap)
        try:
            credit, last = 0.0, time.monotonic()
            while not self.done.wait(0.02):
                now = time.monotonic()
                credit += self.rate * (now - last)
                last = now
                for _ in range(int(credit)):
                    i = self.sent
                    event = {
                        "event_id": f"e{i}",
                        "event_time": int(time.time() * 1000),
                        "org": f"org-{i % 7}",
                        "client": f"c{i % 11}",
                        "bytes_tx": i % 5000,
                        "session_id": f"s{i % 13}",
                        "event_type": "view",
                    }
                    out.send(self.topic, value=orjson.dumps(event), partition=i % PARTITIONS)
                    self.sent += 1
                credit -= int(credit)
            out.flush()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            out.close()

    def stop(self) -> int:
        self.done.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error
        return self.sent


@dataclass
class Sample:
    at: float
    rate: float
    workers: int
    backlog: int
    time_lag_s: float | None
    """The worst task's; None while some task's is unknown (e.g. before a restarted task's
    first batch)."""


@dataclass
class Timeline:
    """What the fleet looked like every second: the figures the docs quote come from here."""

    started: float = field(default_factory=time.monotonic)
    wall_started: float = field(default_factory=time.time)
    """The same instant on the wall clock, which the control store's job events use."""
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> float:
        at = time.monotonic() - self.started
        self.events.append((at, what))
        return at

    def since_start(self, wall: float) -> float:
        """A wall-clock time (a job event's) on this timeline."""
        return wall - self.wall_started


def _live_workers(statuses, now: float) -> set[str]:
    return {s.worker_id for s in statuses if s.state == "running" and now - s.heartbeat_at < 5}


class Monitor(threading.Thread):
    """Samples workers, backlog and time lag (with the broker's newest timestamps) each second."""

    def __init__(self, control: ControlStore, bootstrap: str, topic: str, load: PacedProducer):
        super().__init__(daemon=True)
        self.control = control
        self.bootstrap = bootstrap
        self.topic = topic
        self.load = load
        self.timeline = Timeline()
        self.done = threading.Event()

    def sample(self) -> Sample | None:
        statuses = [s for s in self.control.tasks() if s.topic == self.topic]
        if not statuses:
            return None
        produced = newest_produced_timestamps(self.bootstrap, self.topic, range(PARTITIONS))
        now = time.time()
        lags = task_lags(statuses, {self.topic: produced}, now=now)
        return Sample(
            at=time.monotonic() - self.timeline.started,
            rate=self.load.rate,
            workers=len(_live_workers(statuses, now)),
            backlog=sum(lag.backlog for lag in lags),
            time_lag_s=None
            if any(lag.time_lag_s is None for lag in lags)
            else max(lag.time_lag_s for lag in lags),
        )

    def run(self) -> None:
        while not self.done.wait(1.0):
            with contextlib.suppress(Exception):  # a busy SQLite or broker skips one sample
                if (sample := self.sample()) is not None:
                    self.timeline.samples.append(sample)

    def latest(self, since: float = 0.0) -> Sample | None:
        recent = [s for s in self.timeline.samples if s.at >= since]
        return recent[-1] if recent else None


class Autoscaler:
    """The real sensor, ticked by the test; its scaling runs executed in process.

    The sensor's decision step is wrapped (not replaced) to record every tick that decided:
    a tick that only records its snapshot (no worker reports yet, a rescale under way) does
    not reach it.
    """

    def __init__(
        self, url: str, topic: str, timeline: Timeline, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.decisions: list[dict] = []
        real_decide = autoscaler_sensor.decide

        def recording_decide(policy, metrics, history, guards, last_rescale_at):
            step = real_decide(policy, metrics, history, guards, last_rescale_at)
            self.decisions.append(
                {
                    "at": round(time.monotonic() - timeline.started, 2),
                    "policy": policy.name,
                    "workers": metrics.workers,
                    "proposed": step.proposed.target,
                    "target": step.decision.target,
                    "vetoed_by": step.vetoed_by,
                    "decision_s": round(step.decision_s, 4),
                    "reason": step.proposed.reason,
                }
            )
            return step

        monkeypatch.setattr(autoscaler_sensor, "decide", recording_decide)
        self.sensor = make_autoscaling_sensor(scale_stream_workers)
        self.instance = dg.DagsterInstance.ephemeral()
        self.resources = {"control_store": LocalControlStoreResource(sqlite_url=url)}
        self.fleet = LocalFleetResource(control_store_url=url, topic=topic, timeout_s=90)
        self.timeline = timeline
        self.cursor: str | None = None
        self.runs: list[dict] = []
        self.snapshots: list[dict] = []
        self.last_tick = -TICK_S

    def tick(self) -> dict | None:
        """One sensor evaluation, at most every TICK_S: growth is measured between ticks."""
        if time.monotonic() - self.last_tick < TICK_S * 0.9:
            return None
        self.last_tick = time.monotonic()
        context = dg.build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources=self.resources
        )
        result = self.sensor.evaluate_tick(context)
        self.cursor = result.cursor
        snapshot = json.loads(result.cursor)["history"][-1]
        self.snapshots.append({**snapshot, "at": time.monotonic() - self.timeline.started})
        if not result.run_requests:
            return None
        (request,) = result.run_requests
        tags = dict(request.tags)
        launched = time.time()
        self.timeline.mark(f"sensor: {tags['sluice/from_workers']} -> {tags['sluice/to_workers']}")
        outcome = scale_stream_workers.execute_in_process(
            run_config=request.run_config,
            tags=tags,
            resources={"fleet": self.fleet},
            instance=self.instance,
        )
        assert outcome.success
        self.timeline.mark(f"applied {tags['sluice/to_workers']}")
        run = {
            "tags": tags,
            "config": request.run_config["ops"]["rescale_fleet"]["config"],
            "launched": launched,
        }
        self.runs.append(run)
        return run


def measure_rescales(
    events: Sequence[JobEvent], topic: str, launches: Sequence[float], until: float
) -> list[dict]:
    """Each rescale as the control store's job events tell it (wall-clock times).

    A rescale owns the events of the topic's tasks from its run's launch to the next run's
    (or ``until``). A task moved if it was Scheduled on an agent in that span; the rescale
    started when its first task stopped (its hand-off asked for: Running with no agent, or
    released: Waiting) and settled when the last moved task was Running on its new agent
    (None while one is not). A moved task stood still from its release to that Running.
    """
    rescales = []
    bounds = [*launches, until]
    for start, end in pairwise(bounds):
        span = [
            e
            for e in events
            if e.view is None and (e.task or "").startswith(f"{topic}:") and start <= e.at < end
        ]
        stops = [
            e.at for e in span if e.state == "Waiting" or (e.state == "Running" and not e.agent_id)
        ]
        released: dict[str, float] = {}
        scheduled: dict[str, float] = {}
        running: dict[str, float] = {}
        for e in span:
            if e.state == "Waiting":
                released[e.task] = e.at
            elif e.state == "Scheduled":
                scheduled[e.task] = e.at
                running.pop(e.task, None)
            elif e.state == "Running" and e.agent_id and e.task in scheduled:
                running[e.task] = e.at
        unsettled = sorted(set(scheduled) - set(running))
        first_stop = min(stops, default=None)
        settled = max(running.values()) if running and not unsettled else None
        rescales.append(
            {
                "tasks_moved": len(scheduled),
                "unsettled": unsettled,
                "started_at": first_stop,
                "settled_at": settled,
                "pause_s": None
                if first_stop is None or settled is None
                else round(settled - first_stop, 2),
                "max_task_pause_s": max(
                    (round(running[t] - released[t], 2) for t in running if t in released),
                    default=None,
                ),
            }
        )
    return rescales


def _write_views(path, topic: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "views": [
                    {
                        "name": "closed_loop_by_org",
                        "topic": topic,
                        "grouping_cols": ["org"],
                        "interval": "1m",
                        "aggregation_info": [
                            {"aggregation": "count", "aggregated_col_name": "events"},
                            {
                                "aggregation": "sum",
                                "col_name": "bytes_tx",
                                "aggregated_col_name": "b",
                            },
                        ],
                    }
                ]
            }
        )
    )


def _log_end(bootstrap: str, topic: str) -> dict[int, int]:
    """How many records each partition holds, counted by reading it back: ListOffsets on the
    embedded broker answers the last batch's base offset + 1 (docs/kafka.md), which is short of
    the log end whenever the producer's last batch held more than one record."""
    return {p: len(values) for p, values in read_partitions(bootstrap, topic, PARTITIONS).items()}


@pytest.fixture
def closed_loop(broker, tmp_path, monkeypatch, artifacts_dir):
    """A supervised one-worker fleet, a paced producer and a monitor; all stopped afterwards."""
    for key in list(os.environ):
        if key.startswith("SLUICE_AUTOSCALE_"):
            monkeypatch.delenv(key)
    for key, value in AUTOSCALE_ENV.items():
        monkeypatch.setenv(key, value)
    topic = f"scale-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {topic: PARTITIONS, f"{topic}.dlq": 1})
    views = tmp_path / "views.yaml"
    _write_views(views, topic)
    state = tmp_path / "state"
    env = {
        "SLUICE_STATE_DIR": str(state),
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
        "SLUICE_TOPIC": topic,
        "SLUICE_DEAD_LETTER_TOPIC": f"{topic}.dlq",
        "SLUICE_PARTITIONS": str(PARTITIONS),
        "SLUICE_WORKER_MAX_RATE": str(WORKER_MAX_RATE),
        "SLUICE_FLUSH_INTERVAL_S": "5",
        "SLUICE_CHECKPOINT_INTERVAL_S": "10",
        "SLUICE_STATUS_INTERVAL_S": "1",
    }
    url = f"sqlite:///{state / 'control.db'}"
    control = ControlStore(url)
    load = PacedProducer(broker.bootstrap, topic)
    monitor = Monitor(control, broker.bootstrap, topic, load)
    supervisor = sluice_process(
        ["stream", "--views", str(views), "--workers", "1", "--topic", topic],
        env,
        tmp_path / "supervisor.log",
    )
    load.start()
    monitor.start()
    worker_pids: set[int] = set()
    loop = {
        "topic": topic,
        "control": control,
        "load": load,
        "monitor": monitor,
        "scaler": Autoscaler(url, topic, monitor.timeline, monkeypatch),
        "supervisor": supervisor,
        "bootstrap": broker.bootstrap,
        "worker_pids": worker_pids,
        "figures": {},
    }
    try:
        yield loop
    finally:
        load.done.set()
        monitor.done.set()
        worker_pids.update(s.pid for s in control.tasks())
        stop_process(supervisor, signal.SIGTERM, timeout_s=60)
        for pid in worker_pids:  # workers run in their own sessions: none may outlive the test
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        load.join(30)
        monitor.join(30)
        control.close()
        # what happened, pass or fail: figures, sensor runs, samples and the process logs
        out = artifacts_dir / "autoscale_closed_loop"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(state / "logs", out / "logs", dirs_exist_ok=True)
        shutil.copy(tmp_path / "supervisor.log", out / "logs")
        timeline = monitor.timeline
        scaler = loop["scaler"]
        record = {
            **loop["figures"],
            "runs": [r["tags"] for r in scaler.runs],
            "sensor_decisions": scaler.decisions,
            "snapshots": scaler.snapshots,
            "events": timeline.events,
            "samples": [s.__dict__ for s in timeline.samples],
        }
        (out / "timeline.json").write_text(json.dumps(record, indent=1))


def test_a_load_step_scales_the_fleet_up_under_the_sla_and_back_down(closed_loop):
    control: ControlStore = closed_loop["control"]
    topic, load, monitor = closed_loop["topic"], closed_loop["load"], closed_loop["monitor"]
    timeline = monitor.timeline
    scaler: Autoscaler = closed_loop["scaler"]

    def applied() -> int | None:
        row = control.scaling(topic)
        return None if row is None else row["applied_workers"]

    def reporting() -> int:
        statuses = [s for s in control.tasks() if s.topic == topic]
        closed_loop["worker_pids"].update(s.pid for s in statuses)
        return len(_live_workers(statuses, time.time()))

    def ticking(condition):
        """A wait_until condition that first ticks the sensor (and runs what it asks for)."""

        def check():
            scaler.tick()
            return condition()

        return check

    # the sensor runs its default policy: the test sets none
    assert load_settings(AutoscaleSettings).policy == "mcts"

    # 1. low rate: one worker, and the autoscaler leaves it alone
    wait_until(lambda: applied() == 1 and reporting() == 1, 180, "the one-worker fleet to report")
    timeline.mark("fleet running")
    load.rate = LOW_RATE
    low_until = time.monotonic() + 10
    wait_until(ticking(lambda: time.monotonic() > low_until), 30, "10 s at the low rate", TICK_S)
    assert not scaler.runs, f"the autoscaler rescaled a fleet that keeps up: {scaler.runs}"
    assert scaler.decisions, "the sensor never decided on the settled one-worker fleet"

    # 2. the load step: one worker cannot carry it; the sensor scales up
    load.rate = STEP_RATE
    step_at = timeline.mark("step on")
    wait_until(
        ticking(lambda: (applied() or 0) > 1 and reporting() == applied()),
        120,
        "the sensor to scale the fleet up",
        TICK_S,
    )
    up_at = timeline.mark("scaled up")
    up = scaler.runs[-1]
    assert up["tags"]["sluice/policy"] == "mcts" and int(up["tags"]["sluice/to_workers"]) > 1

    # ... and the time lag comes back under the SLA while the step is still on
    def under_sla() -> bool:
        sample = monitor.latest(since=up_at)
        return (
            sample is not None
            and sample.time_lag_s is not None
            and sample.time_lag_s < SLA_S
            and sample.backlog < STEP_RATE
        )

    wait_until(ticking(under_sla), 150, f"time lag under the {SLA_S:.0f} s SLA", TICK_S)
    sla_at = timeline.mark("under SLA")
    assert load.rate == STEP_RATE
    peak_before = [s for s in timeline.samples if step_at <= s.at <= sla_at]
    peak_lag = max(s.time_lag_s for s in peak_before if s.time_lag_s is not None)
    peak_backlog = max(s.backlog for s in peak_before)
    assert peak_backlog > 2 * STEP_RATE, "the step never built a backlog: nothing was tested"
    most = applied()

    # 3. after the step: the sensor scales the fleet back down
    load.rate = LOW_RATE
    down_from = timeline.mark("step off")
    wait_until(
        ticking(lambda: (applied() or most) < most and reporting() == applied()),
        120,
        "the sensor to scale the fleet down",
        TICK_S,
    )
    down_at = timeline.mark("scaled down")
    assert int(scaler.runs[-1]["tags"]["sluice/to_workers"]) < most

    # ... and stays down: at the low rate the planner brings no worker back (no flapping)
    fewer, runs_down = applied(), len(scaler.runs)
    hold_until = time.monotonic() + HOLD_S
    wait_until(
        ticking(lambda: time.monotonic() > hold_until),
        HOLD_S + 30,
        f"{HOLD_S:.0f} s at the low rate after the scale-down",
        TICK_S,
    )
    timeline.mark("held down")
    back_up = [
        r["tags"]
        for r in scaler.runs[runs_down:]
        if int(r["tags"]["sluice/to_workers"]) >= int(r["tags"]["sluice/from_workers"])
    ]
    assert not back_up and (applied() or fewer) <= fewer, f"scaled back up: {back_up}"

    # 4. stop the load; every message produced is consumed exactly once across the rescales
    produced = load.stop()
    ends = _log_end(closed_loop["bootstrap"], topic)
    assert sum(ends.values()) == produced

    def drained() -> bool:
        tasks = {s.partition: s for s in control.tasks() if s.topic == topic}
        return len(tasks) == PARTITIONS and all(
            tasks[p].next_offset >= end for p, end in ends.items()
        )

    wait_until(drained, 120, "the fleet to consume everything produced")

    # 5. decisions, rescales and their pauses: every run the sensor launched is one rescale of
    # the fleet, seen in the job events, that moved tasks and settled within a bounded pause.
    # Drained is not settled: a moved task whose partition was already read may report
    # Running on its new agent after the last offsets did, so the events are read once every
    # moved task is Running (or the deadline says which one never was)
    launches = [r["launched"] for r in scaler.runs]

    def settled() -> list[dict] | None:
        found = measure_rescales(control.jobs.events(limit=100_000), topic, launches, time.time())
        return found if not any(r["unsettled"] for r in found) else None

    try:
        rescales = wait_until(settled, 60, "every moved task to run on its new agent")
    except AssertionError:
        rescales = measure_rescales(
            control.jobs.events(limit=100_000), topic, launches, time.time()
        )
    for r in rescales:
        for key in ("started_at", "settled_at"):
            if r[key] is not None:
                r[key] = round(timeline.since_start(r[key]), 2)
    recorded = [  # the coordinator's own records, which the sensor fits its pause model from
        {
            "from_agents": r.from_agents,
            "to_agents": r.to_agents,
            "tasks_moved": r.tasks_moved,
            "started_at": round(timeline.since_start(r.started_at), 2),
            "pause_s": round(r.pause_s, 2),
            "task_pause_s": round(r.task_pause_s, 2),
        }
        for r in control.rescales.recent(topic)
    ]
    closed_loop["figures"].update(
        decisions=len(scaler.decisions),
        rescales=len(rescales),
        rescale_pauses=rescales,
        coordinator_rescales=recorded,
    )
    assert {r["tags"]["sluice/policy"] for r in scaler.runs} == {"mcts"}
    assert {d["policy"] for d in scaler.decisions} == {"mcts"}
    changes = [(d["workers"], d["target"]) for d in scaler.decisions if d["target"] != d["workers"]]
    launched = [
        (int(r["tags"]["sluice/from_workers"]), int(r["tags"]["sluice/to_workers"]))
        for r in scaler.runs
    ]
    assert changes == launched, "every decided change, and only those, is a launched run"
    assert len(scaler.decisions) > len(scaler.runs), "the sensor decided only to rescale"
    assert len(rescales) == len(scaler.runs) <= MAX_RESCALES, rescales
    for r in rescales:
        assert r["tasks_moved"] > 0 and not r["unsettled"], f"a rescale did not settle: {r}"
        pause = r["pause_s"]
        assert pause is not None and 0 <= pause < RESCALE_PAUSE_BOUND_S, f"pause out of bounds: {r}"
    # the coordinator recorded the same rescales, which the sensor fits its pause model from
    # (the supervisor stops the newest agents, so the coordinator's lease stays with a0)
    assert [r["tasks_moved"] for r in recorded] == [r["tasks_moved"] for r in rescales]
    for ours, theirs in zip(recorded, rescales, strict=True):
        assert ours["pause_s"] == pytest.approx(theirs["pause_s"], abs=0.5), (ours, theirs)
    assert stop_process(closed_loop["supervisor"], signal.SIGTERM, timeout_s=60) == 0
    final = [s for s in control.tasks() if s.topic == topic]
    assert all(s.state == "stopped" for s in final), [(s.task, s.state) for s in final]
    assert sum(s.consumed for s in final) == produced  # nothing lost, nothing read twice
    assert {s.partition: s.next_offset for s in final} == ends
    assert all(s.consumed == s.processed and s.dead_lettered == 0 for s in final)

    closed_loop["figures"].update(
        worker_max_rate=WORKER_MAX_RATE,
        rates={"low": LOW_RATE, "step": STEP_RATE},
        sla_s=SLA_S,
        scale_up_s=round(up_at - step_at, 1),
        peak_time_lag_s=round(peak_lag, 1),
        peak_backlog=peak_backlog,
        back_under_sla_s=round(sla_at - step_at, 1),
        scale_down_s=round(down_at - down_from, 1),
        workers=[int(r["tags"]["sluice/to_workers"]) for r in scaler.runs],
        decision_s_max=max(d["decision_s"] for d in scaler.decisions),
        produced=produced,
    )
