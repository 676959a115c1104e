"""Child processes (agents under a supervisor, the Spark Connect server and its keeper):
started in their own session with a log, stopped by PID, and found again in ``/proc``.

Stopping sends SIGTERM (a worker checkpoints and exits), waits up to a deadline, then
SIGKILLs the child's process group, so nothing a child started outlives it. What is still
alive of a group, of a process tree or of an environment is read from ``/proc`` (Linux) by
:func:`live_processes`, so teardowns and tests check one way that nothing was left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LiveProcess",
    "live_processes",
    "signal_stop",
    "start_process",
    "stop_process",
    "wait_or_kill",
    "with_environment",
]


@dataclass(frozen=True)
class LiveProcess:
    """A process as ``/proc`` shows it now."""

    pid: int
    ppid: int
    pgid: int
    zombie: bool

    def cmdline(self) -> list[bytes]:
        """Its arguments ([] once it is gone, or for a zombie)."""
        return _proc_list(self.pid, "cmdline")

    def environ(self) -> list[bytes]:
        """Its environment as ``NAME=value`` entries ([] once gone or when not ours to read)."""
        return _proc_list(self.pid, "environ")


def _proc_list(pid: int, name: str) -> list[bytes]:
    """The NUL-separated entries of ``/proc/<pid>/<name>``, without the empty last one."""
    try:
        data = Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return []
    return [entry for entry in data.split(b"\0") if entry]


def live_processes() -> list[LiveProcess]:
    """Every process in ``/proc`` now; one that ends while they are read is left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the command name may hold spaces and parentheses: the fields follow the last ")"
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            found.append(
                LiveProcess(int(entry.name), int(fields[1]), int(fields[2]), fields[0] == "Z")
            )
        except (OSError, ValueError, IndexError):
            continue
    return found


def with_environment(entry: str) -> list[int]:
    """PIDs of live processes whose environment holds ``entry`` (``NAME=value``): whatever a
    command started inherits it, so this finds what it would leave behind."""
    needle = entry.encode()
    return [p.pid for p in live_processes() if needle in p.environ()]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when its parent dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_process(
    command: list[str], env: dict[str, str], log_file: Path | None, *, tied: bool = False
) -> subprocess.Popen:
    """``command`` in a new session (and process group), stdout and stderr appended to
    ``log_file`` (or dropped); ``tied``: killed when this process dies."""
    out = subprocess.DEVNULL
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(log_file, "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent if tied else None,
        )
    finally:
        if out is not subprocess.DEVNULL:
            out.close()


def signal_stop(process: subprocess.Popen | None) -> None:
    """SIGTERM ``process`` if it still runs (the first half of :func:`stop_process`)."""
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)


def wait_or_kill(process: subprocess.Popen | None, timeout_s: float) -> bool:
    """Wait for ``process`` up to ``timeout_s``; SIGKILL its group past that. True if killed."""
    if process is None:
        return False
    try:
        process.wait(timeout=max(0.1, timeout_s))
        return False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
        return True


def stop_process(process: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL of the group after ``timeout_s``."""
    if process is None or process.poll() is not None:
        return
    signal_stop(process)
    wait_or_kill(process, timeout_s)
