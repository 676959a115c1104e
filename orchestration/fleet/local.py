"""A fleet of stream-worker processes on this machine, supervised.

The supervisor starts one `sluice worker` process per worker of the job model and restarts a
worker that dies (it resumes from its checkpoint). A loss (the process killed by a signal:
SIGKILL, the OOM killer, a reclaimed machine) is always restarted, never counted: giving up
on it would orphan its partitions. A crash (the worker exited with an error of its own)
counts, and like Mist's scheduler the supervisor gives up on a worker that crashed three times
within ten minutes. Stopping sends SIGTERM (each worker checkpoints and exits), then SIGKILL
after a deadline.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.fleet.processes import signal_stop, start_process, wait_or_kill
from orchestration.job_model import JobModel, plan_job_model

__all__ = ["LocalFleet", "WorkerProcess"]

log = logging.getLogger(__name__)

CRASH_LIMIT = 3
CRASH_WINDOW_S = 600.0


@dataclass
class WorkerProcess:
    worker_id: str
    tasks: str
    process: subprocess.Popen | None = None
    crashes: deque = field(default_factory=lambda: deque(maxlen=CRASH_LIMIT))
    disabled: bool = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class LocalFleet:
    def __init__(
        self,
        job_model: JobModel,
        *,
        views_file: str | Path | None = None,
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.job_model = job_model
        self.views_file = str(views_file) if views_file else None
        self.env = {**os.environ, **(env or {})}
        self.log_dir = log_dir
        self.workers: dict[str, WorkerProcess] = {
            w: WorkerProcess(w, ",".join(map(str, job_model.tasks_of(w))))
            for w in job_model.workers
        }

    def _command(self, worker: WorkerProcess) -> list[str]:
        cmd = [sys.executable, "-m", "orchestration.cli", "worker", "--id", worker.worker_id]
        cmd += ["--tasks", worker.tasks]
        if self.views_file:
            cmd += ["--views", self.views_file]
        return cmd

    def _spawn(self, worker: WorkerProcess) -> None:
        log_file = self.log_dir / f"worker-{worker.worker_id}.log" if self.log_dir else None
        worker.process = start_process(self._command(worker), self.env, log_file)
        log.info("started worker %s (pid %d) on %s", worker.worker_id, worker.pid, worker.tasks)

    def start(self) -> None:
        for worker in self.workers.values():
            self._spawn(worker)

    def supervise(self) -> list[str]:
        """Restart dead workers; returns what happened, for the caller to show."""
        events = []
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.disabled or worker.process is None or worker.alive():
                continue
            code = worker.process.returncode
            if code < 0:  # killed by a signal: a loss, restarted whatever happened before
                events.append(
                    f"worker {worker.worker_id} lost (signal {-code}): restarting from its "
                    "checkpoint"
                )
                log.warning(events[-1])
                self._spawn(worker)
                continue
            worker.crashes.append(now)
            recent = [t for t in worker.crashes if now - t <= CRASH_WINDOW_S]
            if len(recent) >= CRASH_LIMIT:
                worker.disabled = True
                events.append(
                    f"worker {worker.worker_id} exited {code} {CRASH_LIMIT} times in "
                    f"{CRASH_WINDOW_S / 60:.0f} min: disabled"
                )
                log.error(events[-1])
                continue
            events.append(f"worker {worker.worker_id} exited {code}: restarting")
            log.warning(events[-1])
            self._spawn(worker)
        return events

    def restart(self, reason: str, timeout_s: float = 20.0) -> None:
        """Stop every worker (each checkpoints) and start them again, e.g. to load new views."""
        log.info("restarting the fleet: %s", reason)
        self.stop(timeout_s)
        for worker in self.workers.values():
            worker.disabled = False
            worker.crashes.clear()
            self._spawn(worker)

    def rescale(self, workers: int, timeout_s: float = 20.0) -> JobModel:
        """Run the same tasks on ``workers`` workers: a checkpoint hand-off, nothing lost.

        Every worker stops with a final checkpoint, then the new job model's workers start and
        each task resumes from its checkpoint on whichever worker now owns it.
        """
        tasks = [t for w in self.job_model.workers for t in self.job_model.tasks_of(w)]
        job_model = plan_job_model(tasks, workers)
        log.info("rescaling %d -> %d workers: %s", len(self.workers), workers, job_model.describe())
        self.stop(timeout_s)
        self.job_model = job_model
        self.workers = {
            w: WorkerProcess(w, ",".join(map(str, job_model.tasks_of(w))))
            for w in job_model.workers
        }
        self.start()
        return job_model

    def pids(self) -> dict[str, int | None]:
        return {w: p.pid for w, p in self.workers.items()}

    def stop(self, timeout_s: float = 20.0) -> None:
        for worker in self.workers.values():
            signal_stop(worker.process)
        deadline = time.monotonic() + timeout_s
        for worker in self.workers.values():
            if wait_or_kill(worker.process, deadline - time.monotonic()):
                log.warning("worker %s did not stop in %.0fs: SIGKILL", worker.worker_id, timeout_s)
