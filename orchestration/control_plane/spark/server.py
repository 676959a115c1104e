"""A warm Spark for corrections: a Spark Connect server on 127.0.0.1, kept running by a keeper.

Each correction Dagster launches with ``spark-submit`` starts a JVM: many seconds before any
work, for every run, all day. pyspark ships the Spark Connect server (its jar and server
class), so one long-lived JVM with the project's Spark settings (:func:`spark_conf`) serves
every correction: the run's job is a plain Python process that connects to
``sc://127.0.0.1:PORT`` (``SLUICE_SPARK_REMOTE``), still launched through Dagster Pipes.

The server runs under a *keeper* (``sluice spark serve``, which ``sluice spark start`` and
``sluice up`` start): it launches the JVM in its own process group, records both PIDs and the
port in ``<state_dir>/spark-connect.json``, restarts the JVM on the same port when it dies
(a run that was using it fails and is retried by the assets' retry policy), and on SIGTERM
stops it and removes the file. Stopping the keeper's process group stops everything.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from orchestration.control_plane.processes import start_process
from orchestration.control_plane.spark.session import session_url
from pipelines.batch.config import SparkSettings
from pipelines.batch.spark import spark_conf
from pipelines.kafka.embedded import free_port, pid_alive, wait_for_port

__all__ = [
    "CONNECT_SERVER_CLASS",
    "STATE_FILE",
    "ServerHealth",
    "ServerInfo",
    "SparkConnectServer",
    "keep_serving",
    "server_command",
    "spark_submit_path",
]

log = logging.getLogger(__name__)

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "spark-connect.json"
START_TIMEOUT_S = 120.0
"""How long a JVM may take to open its port (seconds on an idle machine; minutes under load)."""
SESSION_IDLE_TIMEOUT = "24h"
"""How long the server keeps a session no RPC reached (Spark's default: 60 min): the shared
session of hourly corrections would otherwise expire between two of them
(:mod:`orchestration.control_plane.spark.session`)."""


def spark_submit_path() -> str:
    """The ``spark-submit`` of this environment: beside Python, else on the PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if found is None:
        raise FileNotFoundError("spark-submit not found: install pyspark (uv sync)")
    return found


def server_command(settings: SparkSettings, port: int) -> list[str]:
    """``spark-submit`` of the Connect server with every entry of :func:`spark_conf`, so a
    correction through it runs with the settings `sluice batch correct` would use."""
    conf = spark_conf(settings)
    master = conf.pop("spark.master")
    conf.pop("spark.app.name", None)
    command = [spark_submit_path(), "--class", CONNECT_SERVER_CLASS]
    command += ["--name", "sluice Spark Connect", "--master", master]
    conf["spark.connect.grpc.binding.address"] = "127.0.0.1"
    conf["spark.connect.grpc.binding.port"] = str(port)
    conf.setdefault("spark.connect.session.manager.defaultSessionTimeout", SESSION_IDLE_TIMEOUT)
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command


def _server_env(settings: SparkSettings) -> dict[str, str]:
    """Python workers (the session cut's ``mapInPandas``) run the venv's Python with Sluice."""
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = settings.python
    env["PATH"] = f"{Path(settings.python).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("SLUICE_SPARK_REMOTE", None)
    return env


@dataclass(frozen=True)
class ServerInfo:
    """What the state file records."""

    keeper_pid: int
    pid: int
    port: int
    url: str
    started_at: float
    restarts: int
    log_file: str
    session_id: str = ""
    """The session every correction on this JVM shares
    (:mod:`orchestration.control_plane.spark.session`)."""


@dataclass(frozen=True)
class ServerHealth:
    """Whether a correction can use the server now, and what it costs in memory."""

    running: bool
    reason: str
    url: str | None = None
    pid: int | None = None
    keeper_pid: int | None = None
    rss_mb: float | None = None
    uptime_s: float | None = None
    restarts: int = 0
    session_id: str | None = None

    @property
    def session_url(self) -> str | None:
        """The URL of the shared session (the server's URL if the keeper named none)."""
        return session_url(self.url, self.session_id) if self.url else None

    def line(self) -> str:
        if not self.running:
            return f"Spark Connect: not running ({self.reason})"
        return (
            f"Spark Connect: {self.url}, pid {self.pid}, {self.rss_mb:.0f} MB RSS, "
            f"up {self.uptime_s:.0f} s, {self.restarts} restart(s)"
        )


def _rss_mb(pid: int) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


class SparkConnectServer:
    """Find, start, check and stop the Spark Connect server of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.state_file = self.state_dir / STATE_FILE

    def info(self) -> ServerInfo | None:
        """The keeper's record, or None when no keeper runs (a stale file is removed)."""
        try:
            info = ServerInfo(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        if not pid_alive(info.keeper_pid):
            self.state_file.unlink(missing_ok=True)
            return None
        return info

    def health(self) -> ServerHealth:
        """Running means: the keeper and the JVM are alive and the port answers."""
        info = self.info()
        if info is None:
            return ServerHealth(False, "no keeper: `sluice spark start` or `sluice up` starts one")
        common = {
            "url": info.url,
            "keeper_pid": info.keeper_pid,
            "restarts": info.restarts,
            "session_id": info.session_id or None,
        }
        if not pid_alive(info.pid):
            return ServerHealth(False, f"its JVM pid {info.pid} is gone (restarting)", **common)
        if not wait_for_port(info.port, 1.0):
            return ServerHealth(False, f"port {info.port} does not answer", pid=info.pid, **common)
        return ServerHealth(
            True,
            "ok",
            pid=info.pid,
            rss_mb=_rss_mb(info.pid),
            uptime_s=time.time() - info.started_at,
            **common,
        )

    def start(self, port: int | None = None, timeout_s: float = START_TIMEOUT_S) -> ServerInfo:
        """Start a detached keeper (``sluice spark serve``) unless one runs; wait until its
        server answers."""
        running = self.info()
        if running is None:
            command = [sys.executable, "-m", "orchestration.cli", "spark", "serve"]
            if port:
                command += ["--port", str(port)]
            env = {**os.environ, "SLUICE_STATE_DIR": str(self.state_dir)}
            keeper = start_process(command, env, self.state_dir / "logs" / "spark-keeper.log")
            started = time.monotonic()
            while time.monotonic() - started < timeout_s:
                if keeper.poll() is not None:
                    raise RuntimeError(
                        f"the Spark Connect keeper exited with {keeper.returncode}; see "
                        f"{self.state_dir / 'logs' / 'spark-keeper.log'}"
                    )
                if self.health().running:
                    break
                time.sleep(0.2)
            else:
                self.stop()
                raise TimeoutError(f"Spark Connect did not answer within {timeout_s:.0f} s")
        info = self.info()
        assert info is not None
        return info

    def renew_session(self, refused: str) -> str | None:
        """A new shared session id in the record, unless it names another than ``refused``
        already (a keeper restart, or another job renewed it first); the id to use now."""
        info = self.info()
        if info is None:
            return None
        if info.session_id and info.session_id != refused:
            return info.session_id
        renewed = replace(info, session_id=str(uuid.uuid4()))
        _write_info(self.state_file, renewed)
        log.info("shared Spark session %s refused; now %s", refused, renewed.session_id)
        return renewed.session_id

    def wait_running(self, timeout_s: float = START_TIMEOUT_S) -> ServerHealth:
        """The health once the server answers (after a start or a restart), or the last one."""
        deadline = time.monotonic() + timeout_s
        health = self.health()
        while not health.running and time.monotonic() < deadline:
            time.sleep(0.2)
            health = self.health()
        return health

    def stop(self, timeout_s: float = 15.0) -> bool:
        """SIGTERM the keeper (it stops the JVM), then SIGKILL both groups past ``timeout_s``."""
        info = self.info()
        if info is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.keeper_pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and pid_alive(info.keeper_pid):
            time.sleep(0.1)
        for pid in (info.keeper_pid, info.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self.state_file.unlink(missing_ok=True)
        return True


def _write_info(state_file: Path, info: ServerInfo) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(info)))
    tmp.replace(state_file)


def _launch(settings: SparkSettings, port: int, log_file: Path) -> subprocess.Popen:
    # Its own process group, so that a kill of the group takes the JVM and its Python workers.
    return start_process(server_command(settings, port), _server_env(settings), log_file, tied=True)


def _terminate(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # Python workers left in the group


def _warm_up(url: str, state_dir: Path) -> subprocess.Popen:
    """:mod:`orchestration.control_plane.spark.warmup` against the new server, killed with the
    keeper."""
    command = [sys.executable, "-m", "orchestration.control_plane.spark.warmup", "--url", url]
    env = {**os.environ, "SLUICE_STATE_DIR": str(state_dir)}
    return start_process(command, env, state_dir / "logs" / "spark-warm-up.log", tied=True)


def keep_serving(
    state_dir: Path,
    settings: SparkSettings,
    stop: threading.Event,
    port: int | None = None,
    check_every_s: float = 0.5,
) -> None:
    """The keeper's loop: run the server, restart it when it dies, until ``stop`` is set."""
    server = SparkConnectServer(state_dir)
    port = port or free_port()
    log_file = state_dir / "logs" / "spark-connect.log"
    restarts = 0
    process: subprocess.Popen | None = None
    warming: subprocess.Popen | None = None
    try:
        while not stop.is_set():
            process = _launch(settings, port, log_file)
            opened = time.monotonic()
            while not stop.is_set() and process.poll() is None:
                if wait_for_port(port, 0.5):
                    break
                if time.monotonic() - opened > START_TIMEOUT_S:
                    break
            if stop.is_set():
                break
            if process.poll() is not None or not wait_for_port(port, 0.5):
                log.error("Spark Connect did not start on port %d; see %s", port, log_file)
                _terminate(process)
                port = free_port()  # the port may be taken by another process meanwhile
                stop.wait(5.0)
                continue
            info = ServerInfo(
                os.getpid(),
                process.pid,
                port,
                f"sc://127.0.0.1:{port}",
                time.time(),
                restarts,
                str(log_file),
                session_id=str(uuid.uuid4()),  # a new JVM knows no session
            )
            _write_info(server.state_file, info)
            log.info("Spark Connect server pid %d at %s", process.pid, info.url)
            if settings.warm_up:
                warming = _warm_up(info.url, state_dir)
            while not stop.wait(check_every_s):
                if process.poll() is not None:
                    break
            if stop.is_set():
                break
            restarts += 1
            log.warning(
                "Spark Connect server pid %d died (exit %s); restarting it on port %d",
                process.pid,
                process.returncode,
                port,
            )
            _terminate(process)
            if warming is not None:
                _terminate(warming)
    finally:
        if warming is not None:
            _terminate(warming)
        if process is not None:
            _terminate(process)
        server.state_file.unlink(missing_ok=True)
