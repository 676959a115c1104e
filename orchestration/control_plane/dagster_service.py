"""Run Dagster (webserver + daemon, via ``dagster dev``) for ``sluice up`` and the e2e tests.

``start_dagster`` starts ``dagster dev`` on 127.0.0.1 and a free port, with
``DAGSTER_HOME=<state_dir>/dagster`` (telemetry off, the UI's first-visit pop-up marked as
seen), in a new process group whose signal handlers are reset to the defaults: a child of a
non-interactive shell would otherwise inherit SIG_IGN for SIGINT and SIGTERM, ignore
``stop()`` and leave orphans. The webserver, daemon, code server and every run process stay
in that group, so :meth:`DagsterHandle.stop` can end all of them: SIGINT (Dagster's clean
shutdown), then SIGTERM and SIGKILL to the group after deadlines, so nothing is orphaned.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestration.control_plane.processes import live_processes
from pipelines.config import PROJECT_ROOT, SluiceSettings
from pipelines.exceptions import SluiceError
from pipelines.kafka.embedded import free_port

__all__ = [
    "LOCATION_NAME",
    "DagsterHandle",
    "DagsterStartError",
    "graphql",
    "prepare_dagster_home",
    "start_dagster",
]

log = logging.getLogger(__name__)

LOCATION_NAME = "sluice"
"""The code location name in ``workspace.yaml``."""
WORKSPACE = PROJECT_ROOT / "workspace.yaml"
_DAGSTER_YAML = """\
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1  # the spark pool: one correction at a time on this machine
run_coordinator:  # Dagster's default, polled every second instead of every 5 s: a correction
  module: dagster.core.run_coordinator  # run launched by a sensor or by hand starts sooner
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""
_LOCATION_QUERY = """
{ workspaceOrError { __typename ... on Workspace { locationEntries {
    name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""


class DagsterStartError(SluiceError):
    """Dagster did not come up: the process died or did not answer before the deadline."""


def prepare_dagster_home(state_dir: Path) -> Path:
    """``<state_dir>/dagster``, absolute and created, with telemetry off and the nux seen."""
    home = (state_dir / "dagster").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(_DAGSTER_YAML)
    nux = home / ".nux"
    nux.mkdir(exist_ok=True)
    (nux / "nux.yaml").write_text("seen: 1\n")
    return home


def graphql(
    url: str, query: str, variables: dict[str, Any] | None = None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """POST a GraphQL query to the webserver at ``url``; the ``data`` of the answer."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{url.rstrip('/')}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer = json.loads(response.read())
    if answer.get("errors"):
        raise DagsterStartError(f"GraphQL errors from {url}: {answer['errors']}")
    return answer["data"]


def _group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    return sorted(p.pid for p in live_processes() if p.pgid == pgid and not p.zombie)


def _reset_signals() -> None:
    """Runs in the child before exec: default handlers, whatever the parent ignored."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


@dataclass
class DagsterHandle:
    """A running ``dagster dev``: its URL, process group and log; ``stop()`` ends it all."""

    url: str
    port: int
    pid: int
    dagster_home: Path
    log_file: Path
    process: subprocess.Popen = field(repr=False)

    @property
    def pgid(self) -> int:
        return self.pid  # the leader of its own session and group

    @property
    def pids(self) -> list[int]:
        """Every live process of the group: dagster dev, webserver, daemon, code server, runs."""
        return _group_pids(self.pgid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return graphql(self.url, query, variables)

    def wait_ready(self, timeout_s: float = 120.0, location: str | None = LOCATION_NAME) -> None:
        """Until the webserver answers and (if given) the code location has loaded."""
        deadline = time.monotonic() + timeout_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if not self.alive():
                raise DagsterStartError(
                    f"dagster dev exited with {self.process.returncode}; log {self.log_file}:\n"
                    + self._log_tail()
                )
            try:
                data = self.graphql(_LOCATION_QUERY)
            except (OSError, urllib.error.URLError, DagsterStartError, ValueError) as exc:
                last_error = str(exc)
            else:
                if location is None:
                    return
                entries = {
                    e["name"]: e for e in data["workspaceOrError"].get("locationEntries", [])
                }
                entry = entries.get(location)
                if entry and entry["loadStatus"] == "LOADED":
                    loaded = entry["locationOrLoadError"] or {}
                    if loaded.get("__typename") == "PythonError":
                        raise DagsterStartError(
                            f"code location {location} failed to load: {loaded.get('message')}"
                        )
                    return
                last_error = (
                    f"code location {location} not loaded yet ({entry and entry['loadStatus']})"
                )
            time.sleep(0.5)
        raise DagsterStartError(
            f"Dagster at {self.url} not ready after {timeout_s:.0f}s ({last_error}); "
            f"log {self.log_file}:\n" + self._log_tail()
        )

    def stop(self, interrupt_timeout_s: float = 20.0, term_timeout_s: float = 5.0) -> int | None:
        """SIGINT the group, then SIGTERM and SIGKILL after deadlines; the leader's exit code."""
        for sig, timeout in (
            (signal.SIGINT, interrupt_timeout_s),
            (signal.SIGTERM, term_timeout_s),
            (signal.SIGKILL, term_timeout_s),
        ):
            if not self.pids and self.process.poll() is not None:
                break
            log.info("stopping Dagster (group %d) with %s", self.pgid, sig.name)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=0.1)
                if self.process.poll() is not None and not self.pids:
                    break
        leftovers = self.pids
        if leftovers:
            log.warning("Dagster processes still alive after SIGKILL: %s", leftovers)
        return self.process.poll()

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def dagster_env(settings: SluiceSettings, dagster_home: Path) -> dict[str, str]:
    """The child's environment: the caller's, plus the resolved Sluice settings, so the code
    location and the runs see exactly the state the caller uses."""
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "SLUICE_STATE_DIR": str(settings.resolved_state_dir),
        "SLUICE_STORAGE_ROOT": settings.resolved_storage_root,
        "SLUICE_CONTROL_STORE_URL": settings.resolved_control_store_url,
        "SLUICE_VIEWS_FILE": str(Path(settings.views_file).resolve()),
        "SLUICE_TOPIC": settings.topic,
        "PYTHONUNBUFFERED": "1",
    }
    if settings.s3_endpoint_url:
        env["SLUICE_S3_ENDPOINT_URL"] = settings.s3_endpoint_url
    return env


def start_dagster(
    settings: SluiceSettings,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    workspace: Path = WORKSPACE,
    extra_env: dict[str, str] | None = None,
    wait: bool = True,
    timeout_s: float = 120.0,
) -> DagsterHandle:
    """Start the webserver and the daemon (schedules, sensors, backfills) on ``host:port``.

    ``port`` defaults to a free one. With ``wait`` (default) returns once the UI answers and
    the ``sluice`` code location has loaded; on failure everything started is stopped.
    """
    state_dir = settings.resolved_state_dir
    home = prepare_dagster_home(state_dir)
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_file = logs / "dagster.log"
    port = port or free_port()
    command = [
        sys.executable,
        "-m",
        "dagster",
        "dev",
        "-w",
        str(workspace),
        "-h",
        host,
        "-p",
        str(port),
    ]
    env = {**dagster_env(settings, home), **(extra_env or {})}
    env.setdefault("SLUICE_DAGSTER_URL", f"http://{host}:{port}")  # links in alerts
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            command,
            cwd=str(workspace.parent),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_reset_signals,
        )
    handle = DagsterHandle(f"http://{host}:{port}", port, process.pid, home, log_file, process)
    log.info("dagster dev pid %d on %s (DAGSTER_HOME %s)", process.pid, handle.url, home)
    if wait:
        try:
            handle.wait_ready(timeout_s)
        except BaseException:
            handle.stop()
            raise
    return handle
