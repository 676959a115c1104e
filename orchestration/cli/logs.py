"""Where the CLI's logs go: warnings to the terminal, everything to ``<state>/logs/sluice.log``.

The terminal is for the operator: Sluice's own warnings and errors, one line each, through
rich so they do not tear a live display. Libraries (kafka-python, librdkafka, Alembic, boto)
write to the file only: kafka-python logs ERROR lines and tracebacks for connections it closes
itself at shutdown, which a newcomer reads as a crash. ``-v`` puts DEBUG on the terminal too.
Every process of a run (agents, the generator) appends to the same file, each line naming its
process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler

__all__ = [
    "LOG_FILE",
    "configure_logging",
    "dump_stacks_on_sigusr1",
    "stderr_console",
]

LOG_FILE = "sluice.log"
"""The log file's name under ``<state>/logs``."""

OWN_LOGGERS = ("pipelines", "orchestration", "assets", "quality", "__main__")
"""Loggers whose warnings reach the terminal; every other logger writes to the file only."""

THIRD_PARTY_LEVELS = {"kafka": logging.INFO, "librdkafka": logging.INFO}
"""Levels of the Kafka clients in the file, also under -v (their DEBUG is per request)."""


class _TerminalConsole(Console):
    """Rich's console, except that a closed terminal pipe silences it instead of exiting.

    ``sluice up 2>&1 | tee up.log`` and Ctrl-C: the signal ends tee too, and the next line
    printed (the stop's own log line) meets a broken pipe. Rich's default then raises
    SystemExit, which cut the stop short and left every child running. Output goes nowhere
    from then on (the log file still gets everything) and the stop goes on.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                os.dup2(devnull, fd)
        os.close(devnull)


_console = _TerminalConsole(stderr=True)


def stderr_console() -> Console:
    """The console log lines are printed on; a live display shares it so lines stay whole."""
    return _console


class _OwnRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.split(".", 1)[0] in OWN_LOGGERS


def configure_logging(verbose: bool = False, state_dir: Path | None = None) -> Path | None:
    """Set up the terminal and, when ``state_dir`` is known, the log file; the file's path."""
    root = logging.getLogger()
    for handler in list(root.handlers):  # ours from an earlier call (tests call main twice)
        if getattr(handler, "sluice", False):
            root.removeHandler(handler)
            handler.close()
    # Sluice's own DEBUG lines go to the file; libraries log from INFO up (their DEBUG costs
    # time on hot paths), everything with -v.
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    terminal = RichHandler(
        console=_console,
        level=logging.DEBUG if verbose else logging.WARNING,
        show_path=False,
        rich_tracebacks=False,
        markup=False,
    )
    terminal.sluice = True
    if not verbose:
        terminal.addFilter(_OwnRecords())
    root.addHandler(terminal)
    for name, level in THIRD_PARTY_LEVELS.items():
        logging.getLogger(name).setLevel(level)
    path = None
    if state_dir is not None:
        try:
            (state_dir / "logs").mkdir(parents=True, exist_ok=True)
            path = state_dir / "logs" / LOG_FILE
            to_file = logging.FileHandler(path, encoding="utf-8")
        except OSError as exc:  # a read-only state dir must not stop the command
            logging.getLogger(__name__).warning("cannot write the log file: %s", exc)
            path = None
        else:
            to_file.sluice = True
            to_file.setLevel(logging.DEBUG)
            to_file.setFormatter(
                logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
            )
            root.addHandler(to_file)
    threading.excepthook = _thread_exception
    return path


def _thread_exception(args: threading.ExceptHookArgs) -> None:
    """A library thread that dies (kafka-python's I/O thread at shutdown) goes to the file;
    a thread of ours that dies is an error the operator sees."""
    if args.exc_type is SystemExit:
        return
    tb = args.exc_traceback
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    ours = any(name.split(".", 1)[0] in OWN_LOGGERS for name in frames)
    thread = args.thread.name if args.thread is not None else "?"
    logger = logging.getLogger("orchestration.threads" if ours else "threads")
    logger.error(
        "thread %s died: %s: %s",
        thread,
        args.exc_type.__name__,
        args.exc_value,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )
    if not logging.getLogger().handlers:  # logging not set up: keep Python's default
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)


def dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` writes every thread's stack to stderr: what a process that looks
    stuck is waiting on, without stopping it (Python's faulthandler, safe in a handler)."""
    if not hasattr(signal, "SIGUSR1") or sys.__stderr__ is None:
        return
    with contextlib.suppress(OSError, ValueError):  # no real stderr: go without
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
