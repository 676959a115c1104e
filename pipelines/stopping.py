"""Bounded stops: a process told to stop exits within its deadline, whatever it waits on.

A stop signal sets an event the process's loops watch and arms a :class:`StopDeadline`. If the
graceful stop (final checkpoints, releasing tasks and leases, stopping children) has not ended
when the deadline passes, the deadline says in the log what it gives up on, runs its last
step (a supervisor SIGKILLs its children by PID) and exits the process. That exit is no worse
than a SIGKILL, which every part survives: a task resumes from its last checkpoint and the job
model's loss detection moves what the agent could not release.

The deadline runs in a thread of its own: a Python signal handler runs only when the main
thread runs Python, and a main thread waiting in C (a hung server, a lock) never would.

May import: the standard library only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["StopDeadline", "on_stop_signals", "run_until_stopped"]

log = logging.getLogger(__name__)


class StopDeadline:
    """Exits the process ``deadline_s`` after :meth:`arm` unless it exited by itself before."""

    def __init__(
        self,
        deadline_s: float,
        what: str,
        last_step: Callable[[], None] | None = None,
        exit_code: int = 1,
    ) -> None:
        self.deadline_s = deadline_s
        self.what = what
        """What stops, for the log: ``agent a0``, ``sluice stream``."""
        self.last_step = last_step
        """Runs just before the forced exit (e.g. SIGKILL the children); must not block."""
        self.exit_code = exit_code
        self.armed_at: float | None = None
        self._now = threading.Event()
        self._lock = threading.Lock()

    def arm(self) -> None:
        """Start counting (once; later calls change nothing)."""
        with self._lock:
            if self.armed_at is not None:
                return
            self.armed_at = time.monotonic()
        threading.Thread(target=self._watch, name="stop-deadline", daemon=True).start()

    def expire_now(self) -> None:
        """Give up at once (a second stop signal)."""
        self.arm()
        self._now.set()

    def _watch(self) -> None:
        early = self._now.wait(self.deadline_s)
        waited = time.monotonic() - (self.armed_at or 0.0)
        why = "a second stop signal" if early else f"its stop deadline of {self.deadline_s:g} s"
        log.error(
            "%s did not stop in %.1f s (%s): giving up on what it was still doing and exiting; "
            "what it did not release moves when the job model sees it lost",
            self.what,
            waited,
            why,
        )
        try:
            if self.last_step is not None:
                self.last_step()
        except Exception:
            log.exception("%s: the last step before exiting failed", self.what)
        _flush_everything()
        os._exit(self.exit_code)


def _flush_everything() -> None:
    """Flush the log and the terminal (exiting anyway: a stuck handler must not stop that)."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def on_stop_signals(
    stop: threading.Event,
    deadline: StopDeadline,
    signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT),
    then: Callable[[int], None] | None = None,
) -> None:
    """Install handlers (main thread only): the first stop signal sets ``stop`` and arms
    ``deadline``, then calls ``then(signum)``; a second one expires the deadline at once."""

    def handler(signum: int, _frame: object) -> None:
        if deadline.armed_at is not None:
            log.warning("%s: signal %d again: stopping now", deadline.what, signum)
            deadline.expire_now()
            return
        log.info(
            "%s: signal %d, stopping (at most %g s)", deadline.what, signum, deadline.deadline_s
        )
        stop.set()
        deadline.arm()
        if then is not None:
            then(signum)

    for signum in signals:
        signal.signal(signum, handler)


def run_until_stopped(
    body: Callable[[], object], stop: threading.Event, name: str, grace_s: float = 0.0
) -> None:
    """Run ``body`` in a daemon thread until it returns or ``stop`` is set, whichever is first
    (then ``grace_s`` more for it to finish); re-raise what it raised. The main thread only
    waits here, so it takes a signal at once whatever ``body`` waits on; a ``body`` still
    running then is left behind (it ends with the process)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # re-raised in the main thread
            failed.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    while thread.is_alive() and not stop.wait(0.2):
        pass
    thread.join(grace_s)
    if failed:
        raise failed[0]
