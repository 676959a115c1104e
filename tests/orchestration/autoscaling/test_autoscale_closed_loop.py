"""The autoscaler closed around a live fleet (issue 4, "How it is tested", live).

A `sluice stream` supervisor runs one rate-capped worker (``SLUICE_WORKER_MAX_RATE``) on a
6-partition topic of the real broker. A producer thread sends a low rate, then a load step
that one worker cannot carry, then the low rate again. The test ticks the real `lag_autoscaler`
sensor every 2 s and executes each scaling run it requests in process; the supervisor carries
the runs out. It asserts the fleet scales up, the time lag returns under the SLA while the step
is still on, the fleet scales back down after it, and every message produced was consumed
exactly once across the rescales.
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
from dataclasses import dataclass, field

import dagster as dg
import orjson
import pytest
import yaml
from kafka import TopicPartition

from orchestration.jobs import scale_stream_workers
from orchestration.lag import newest_produced_timestamps, task_lags
from orchestration.resources.control import LocalControlStoreResource
from orchestration.resources.fleet import LocalFleetResource
from orchestration.sensors.autoscaler import make_autoscaling_sensor
from pipelines.control import ControlStore
from pipelines.kafka import consumer, end_offsets, ensure_topics, producer
from tests.fixtures.processes import sluice_process, stop_process, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

PARTITIONS = 6
WORKER_MAX_RATE = 500  # msg/s per worker: one carries LOW_RATE, not STEP_RATE; three drain it
LOW_RATE = 60
STEP_RATE = 700
MAX_WORKERS = 3
SLA_S = 10.0  # time lag: newest record produced minus newest record processed
TICK_S = 2.0
COOLDOWN_S = 15.0

AUTOSCALE_ENV = {
    "SLUICE_AUTOSCALE_POLICY": "ds2",
    "SLUICE_AUTOSCALE_SENSOR_COOLDOWN_S": str(COOLDOWN_S),
    "SLUICE_AUTOSCALE_FLEET__MAX_WORKERS": str(MAX_WORKERS),
    "SLUICE_AUTOSCALE_DS2__CATCH_UP_S": "30",
    "SLUICE_AUTOSCALE_DS2__RESTART_TIME_S": "5",
    "SLUICE_AUTOSCALE_DS2__SCALE_DOWN_INTERVAL_S": "10",
    "SLUICE_AUTOSCALE_GUARDS__COOLDOWN_S": "0",
    "SLUICE_AUTOSCALE_GUARDS__HYSTERESIS_WORKERS": "0",
}


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
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> float:
        at = time.monotonic() - self.started
        self.events.append((at, what))
        return at


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
    """The real sensor, ticked by the test; its scaling runs executed in process."""

    def __init__(self, url: str, topic: str, timeline: Timeline) -> None:
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
        self.timeline.mark(f"sensor: {tags['sluice/from_workers']} -> {tags['sluice/to_workers']}")
        outcome = scale_stream_workers.execute_in_process(
            run_config=request.run_config,
            tags=tags,
            resources={"fleet": self.fleet},
            instance=self.instance,
        )
        assert outcome.success
        self.timeline.mark(f"applied {tags['sluice/to_workers']}")
        run = {"tags": tags, "config": request.run_config["ops"]["rescale_fleet"]["config"]}
        self.runs.append(run)
        return run


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
    client = consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        client.assign(tps)
        return {tp.partition: end for tp, end in end_offsets(client, tps).items()}
    finally:
        client.close()


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
        "scaler": Autoscaler(url, topic, monitor.timeline),
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
        record = {
            **loop["figures"],
            "runs": [r["tags"] for r in loop["scaler"].runs],
            "snapshots": loop["scaler"].snapshots,
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

    # 1. low rate: one worker, and the autoscaler leaves it alone
    wait_until(lambda: applied() == 1 and reporting() == 1, 180, "the one-worker fleet to report")
    timeline.mark("fleet running")
    load.rate = LOW_RATE
    low_until = time.monotonic() + 10
    wait_until(ticking(lambda: time.monotonic() > low_until), 30, "10 s at the low rate", TICK_S)
    assert not scaler.runs, f"the autoscaler rescaled a fleet that keeps up: {scaler.runs}"

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
    assert up["tags"]["sluice/policy"] == "ds2" and int(up["tags"]["sluice/to_workers"]) > 1

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
        produced=produced,
    )
