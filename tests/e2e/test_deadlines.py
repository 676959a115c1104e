"""`sluice stream`, `up`, `agent` and `status` exit within 15 s of SIGTERM, or of SIGINT to their
process group, whatever is gone: the broker, the control store or the object storage.

Real processes and real signals. `stream` and `status` run with the defaults of
SLUICE_*_TIMEOUT_S and SLUICE_STOP_TIMEOUT_S: the 15 s promise is made for the defaults. `up` and
`agent` stop through the same deadlines; they run with every timeout at 3 s (``QUICK``), which
keeps the suite short and still shows that their stop is bounded by the settings. Gone means,
per case:
- the broker: a broker of the test's own, SIGKILLed (refused connections) or SIGSTOPped (a
  hung broker) after the fleet runs: the issue's case, a supervisor blocked in end_offsets;
- the control store: the tests' PostgreSQL behind a proxy that freezes after the fleet runs,
  every connection open and silent (a server hung mid-query, the hardest case), or a black
  hole from the start for `status`;
- the storage: an s3:// storage root whose endpoint is a black hole (accepts, never answers).

Each case measures the time from the signal to the exit, and checks that no process the
command started is left (every process of a case carries a marker in its environment).
The times go to test-artifacts/deadlines.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from pipelines.control import ControlStore, TaskStatus
from pipelines.kafka import EmbeddedBroker
from tests.fixtures.blackhole import BlackHole, FreezableProxy
from tests.fixtures.processes import MARK, marked, sluice_process, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

EXIT_WITHIN_S = 15.0
PARTITIONS = 2
TOPIC = "events"

MEASURED: dict[str, float] = {}

QUICK = {
    name: "3"
    for name in (
        "SLUICE_STOP_TIMEOUT_S",
        "SLUICE_CONTROL_STORE_TIMEOUT_S",
        "SLUICE_STORAGE_TIMEOUT_S",
        "SLUICE_KAFKA_TIMEOUT_S",
    )
}
"""The timeouts of the `up` and `agent` cases (see the module's docstring)."""


@pytest.fixture(scope="module", autouse=True)
def _record_times(artifacts_dir: Path):
    yield
    if MEASURED:
        out = artifacts_dir / "deadlines.json"
        out.write_text(json.dumps(MEASURED, indent=2, sort_keys=True) + "\n")


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask): before it does,
    SIGUSR1 would end it instead of dumping its stacks."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


class Case:
    """One command under test: its environment, its process, how long its stop took."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.tmp_path = tmp_path
        self.name = name
        self.mark = uuid.uuid4().hex
        self.state = tmp_path / "state"
        self.control_url = f"sqlite:///{self.state / 'control.db'}"
        self.env = {
            MARK: self.mark,
            "SLUICE_STATE_DIR": str(self.state),
            "SLUICE_TOPIC": TOPIC,
            "SLUICE_DEAD_LETTER_TOPIC": f"{TOPIC}.dlq",
            "SLUICE_PARTITIONS": str(PARTITIONS),
            "SLUICE_FLEET_SAMPLE_INTERVAL_S": "1",
            "SLUICE_STATUS_INTERVAL_S": "0.5",
            "SLUICE_AGENT_HEARTBEAT_INTERVAL_S": "0.5",
            "SLUICE_CHECKPOINT_INTERVAL_S": "2",
            "SLUICE_FLUSH_INTERVAL_S": "1",
        }
        self.process: subprocess.Popen | None = None
        self.log = tmp_path / "logs" / f"{name}.log"

    def start(self, args: list[str]) -> None:
        self.process = sluice_process(args, self.env, self.log, cwd=self.tmp_path / "cwd")

    def tail(self, lines: int = 60) -> str:
        parts = []
        for path in [self.log, *sorted((self.state / "logs").glob("*.log"))]:
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def stacks(self) -> str:
        """Every thread's stack now (``kill -USR1``, written to the process's output)."""
        assert self.process is not None
        pid = self.process.pid
        wait_until(lambda: catches(pid, signal.SIGUSR1), 30, "the stack dump handler")
        size = self.log.stat().st_size if self.log.exists() else 0
        os.kill(pid, signal.SIGUSR1)

        def written() -> str:
            with open(self.log, "rb") as out:
                out.seek(size)
                return out.read().decode(errors="replace")

        seen = [""]

        def dumped() -> str:
            # No "Current thread" line when a thread Python does not know (librdkafka's, say)
            # took the signal; so a dump is its thread headers, once two polls read the same.
            text = written()
            previous, seen[0] = seen[0], text
            if "(most recent call first)" not in text or not text.endswith("\n"):
                return ""
            return text if text == previous else ""

        wait_until(dumped, 10, "a stack dump")
        return dumped()

    def waits_in(self, where: str, timeout_s: float = 30) -> None:
        """Until a thread's stack shows ``where`` (e.g. the supervisor in the lag probe)."""
        wait_until(lambda: where in self.stacks(), timeout_s, f"{self.name} in {where}", 0.5)

    def stop(self, sig: int, group: bool = False) -> float:
        """Send ``sig`` (to the process group if ``group``); seconds until the process exited."""
        assert self.process is not None and self.process.poll() is None, self.tail()
        started = time.monotonic()
        if group:
            os.killpg(self.process.pid, sig)
        else:
            os.kill(self.process.pid, sig)
        try:
            self.process.wait(timeout=EXIT_WITHIN_S + 20)
        except subprocess.TimeoutExpired:
            stacks = self.stacks()
            pytest.fail(
                f"{self.name} still runs {EXIT_WITHIN_S + 20:.0f} s after {sig!r}:\n"
                f"{stacks}\n{self.tail()}"
            )
        took = time.monotonic() - started
        MEASURED[self.name] = round(took, 2)
        return took

    def check(self, took: float) -> None:
        assert took <= EXIT_WITHIN_S, f"{self.name} took {took:.1f} s to exit:\n{self.tail()}"
        wait_until(lambda: not marked(self.mark), 5, f"no process of {self.name} left")

    def close(self) -> None:
        for pid in marked(self.mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def case(tmp_path: Path, request: pytest.FixtureRequest):
    made = Case(tmp_path, request.node.name)
    yield made
    made.close()


@pytest.fixture
def own_broker(tmp_path: Path):
    """A broker of this test alone, which it may kill or freeze."""
    embedded = EmbeddedBroker(tmp_path / "broker")
    info = embedded.start()
    yield info
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGCONT)
    embedded.stop()


@pytest.fixture
def hole():
    made = BlackHole()
    yield made
    made.close()


@pytest.fixture
def pg_proxy(postgres_url: str):
    """(proxy, URL through it) to an empty PostgreSQL database."""
    from tests.fixtures.postgres import empty_database

    empty_database(postgres_url)
    url = make_url(postgres_url)
    proxy = FreezableProxy((url.host or "127.0.0.1", url.port or 5432))
    yield proxy, url.set(port=proxy.port).render_as_string(hide_password=False)
    proxy.close()


def s3_unreachable(case: Case, hole: BlackHole) -> None:
    case.env.update(
        {
            "SLUICE_STORAGE_ROOT": "s3://sluice-deadlines/root",
            "SLUICE_S3_ENDPOINT_URL": f"http://{hole.address}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )


def tasks_running(control_url: str, agents: int) -> bool:
    """Every partition's task Running, on ``agents`` live agents between them (or fewer)."""
    store = ControlStore(control_url)
    try:
        tasks = store.jobs.assignments(TOPIC)
        return len(tasks) == PARTITIONS and all(a.state == "Running" for a in tasks)
    finally:
        store.close()


def restoring_from_storage(hole: BlackHole, control_url: str) -> bool:
    """Tasks were given to agents, which are now waiting for the storage's answer."""
    store = ControlStore(control_url)
    try:
        tasks = store.jobs.assignments(TOPIC)
    finally:
        store.close()
    return len(tasks) == PARTITIONS and bool(hole.held)


def prepare(gone: str, case: Case, broker_address: str, hole, pg_proxy_factory) -> None:
    case.env["KAFKA_BOOTSTRAP_SERVERS"] = broker_address
    if gone == "control store":
        proxy, url = pg_proxy_factory()
        case.env["SLUICE_CONTROL_STORE_URL"] = case.control_url = url
        case.proxy = proxy
    elif gone == "storage":
        s3_unreachable(case, hole)


def running_then_gone(gone: str, case: Case, broker, hole, agents: int, how: int) -> None:
    """Wait until the fleet runs (or, storage gone, waits on it); then take ``gone`` away."""
    timeout = 90
    if gone == "storage":
        wait_until(lambda: restoring_from_storage(hole, case.control_url), timeout, "restores")
        return
    wait_until(lambda: tasks_running(case.control_url, agents), timeout, "tasks Running")
    if gone == "broker":
        os.kill(broker.pid, how)
    else:
        case.proxy.freeze()
    assert case.process is not None and case.process.poll() is None, case.tail()


GONE = ["broker", "control store", "storage"]


@pytest.fixture
def pg_proxy_factory(request: pytest.FixtureRequest):
    return lambda: request.getfixturevalue("pg_proxy")


@pytest.mark.parametrize(
    ("gone", "sig", "group", "how"),
    [
        # the case: a running `sluice stream` whose broker went away, then SIGTERM
        ("broker", signal.SIGTERM, False, signal.SIGKILL),
        ("broker", signal.SIGINT, True, signal.SIGSTOP),
        ("control store", signal.SIGTERM, False, None),
        ("storage", signal.SIGTERM, False, None),
    ],
    ids=["broker-killed-SIGTERM", "broker-hung-SIGINT-group", "store-hung-SIGTERM", "s3-SIGTERM"],
)
def test_stream_exits_within_15_s(
    case, own_broker, hole, pg_proxy_factory, gone, sig, group, how
) -> None:
    prepare(gone, case, own_broker.bootstrap, hole, pg_proxy_factory)
    agents = 2 if how == signal.SIGKILL else 1  # the case as it was; the others cheaper
    case.start(["stream", "--agents", str(agents)])
    running_then_gone(gone, case, own_broker, hole, agents, how)
    if gone == "broker":  # where the supervisor blocked for good: the lag probe
        case.waits_in("orchestration/control_plane/lag.py")
    case.check(case.stop(sig, group))


@pytest.mark.parametrize(
    ("gone", "sig", "group"),
    [
        ("broker", signal.SIGINT, True),
        ("control store", signal.SIGTERM, False),
        ("storage", signal.SIGTERM, False),
    ],
    ids=["broker-killed-SIGINT-group", "store-hung-SIGTERM", "s3-SIGTERM"],
)
def test_up_exits_within_15_s(case, own_broker, hole, pg_proxy_factory, gone, sig, group) -> None:
    prepare(gone, case, own_broker.bootstrap, hole, pg_proxy_factory)
    case.env.update(QUICK)
    args = ["up", "--no-dagster", "--agents", "1", "--duration", "6h", "--peak-rate", "200"]
    case.start(args)
    running_then_gone(gone, case, own_broker, hole, 1, signal.SIGKILL)
    case.check(case.stop(sig, group))


@pytest.mark.parametrize(
    ("gone", "sig", "group"),
    [
        ("broker", signal.SIGTERM, False),
        ("control store", signal.SIGTERM, False),
        ("storage", signal.SIGINT, True),
    ],
    ids=["broker-killed-SIGTERM", "store-hung-SIGTERM", "s3-SIGINT-group"],
)
def test_agent_exits_within_15_s(
    case, own_broker, hole, pg_proxy_factory, gone, sig, group
) -> None:
    from pipelines.kafka import ensure_topics

    ensure_topics(own_broker.bootstrap, {TOPIC: PARTITIONS, f"{TOPIC}.dlq": 1})
    prepare(gone, case, own_broker.bootstrap, hole, pg_proxy_factory)
    case.env.update(QUICK)
    case.start(["agent", "--id", "solo"])
    running_then_gone(gone, case, own_broker, hole, 1, signal.SIGKILL)
    case.check(case.stop(sig, group))


@pytest.mark.parametrize(
    ("gone", "sig", "group"),
    [
        ("broker", signal.SIGTERM, False),
        ("control store", signal.SIGINT, True),
        ("storage", signal.SIGTERM, False),
    ],
    ids=["broker-hole-SIGTERM", "store-hole-SIGINT-group", "s3-SIGTERM"],
)
def test_status_exits_within_15_s(case, hole, gone, sig, group) -> None:
    """`status` against a black hole from the start: it blocks in its first call to it."""
    case.env["KAFKA_BOOTSTRAP_SERVERS"] = hole.address if gone == "broker" else "127.0.0.1:9"
    if gone == "control store":
        case.env["SLUICE_CONTROL_STORE_URL"] = f"postgresql+psycopg://sluice@{hole.address}/s"
    else:  # a task to show, so that status asks the broker for its log end
        store = ControlStore(case.control_url)
        store.report_tasks([TaskStatus(f"{TOPIC}-0", TOPIC, 0, "w", 1, end_offset=5)])
        store.close()
    if gone == "storage":
        s3_unreachable(case, hole)
    case.start(["status"])
    if gone == "storage":  # status reads no object: it runs its loop and exits on a signal
        case.waits_in("in show")
    else:
        wait_until(lambda: hole.held, 60, "status to call the black hole")
    case.check(case.stop(sig, group))


def test_a_closed_proxy_ends_the_sessions_it_froze(pg_proxy) -> None:
    """The next case's store starts empty: a session frozen mid-transaction (its client killed
    behind the frozen proxy) ends when the proxy closes, and its lock goes with it."""
    import psycopg

    proxy, url = pg_proxy
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    direct = make_url(dsn).set(port=proxy.target[1]).render_as_string(hide_password=False)
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute("CREATE TABLE frozen_lock (x int)")
    client = psycopg.connect(dsn)
    client.execute("LOCK TABLE frozen_lock")
    proxy.freeze()
    client.pgconn.send_query(b"SELECT 1")  # swallowed by the frozen proxy, never answered
    client.pgconn.flush()
    wait_until(lambda: proxy.swallowed, 5, "the proxy to swallow the query")
    proxy.close()
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute("DROP TABLE frozen_lock")  # LockNotAvailable if the session lived on
