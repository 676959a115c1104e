"""Child processes of a supervisor: started in their own session with a log, stopped by PID.

Stopping sends SIGTERM (a worker checkpoints and exits), waits up to a deadline, then
SIGKILLs the child's process group, so nothing a child started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

__all__ = ["signal_stop", "start_process", "stop_process", "wait_or_kill"]


def start_process(
    command: list[str], env: dict[str, str], log_file: Path | None
) -> subprocess.Popen:
    """``command`` in a new session, stdout and stderr appended to ``log_file`` (or dropped)."""
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
