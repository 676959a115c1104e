"""The terminal gets Sluice's own warnings; the log file gets everything, libraries included."""

from __future__ import annotations

import logging
import threading

import pytest

from orchestration.cli.logs import configure_logging


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level, hook = list(root.handlers), root.level, threading.excepthook
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    threading.excepthook = hook


def test_library_errors_go_to_the_file_only(tmp_path, capsys, restore_logging) -> None:
    path = configure_logging(False, tmp_path)
    logging.getLogger("kafka.cluster").error("Metadata refresh failed: Cancelled")
    logging.getLogger("pipelines.stream.worker").warning("task events:1 fenced")
    logging.getLogger("orchestration.control_plane.fleet").info("agent a0 registered")
    logging.getLogger("pipelines.stream.task").debug("checkpoint at offset 12")
    terminal = capsys.readouterr().err
    assert "task events:1 fenced" in terminal
    assert "Metadata refresh" not in terminal and "ERROR" not in terminal
    assert "registered" not in terminal  # INFO is for the file
    log = path.read_text()
    for line in ("Metadata refresh failed", "task events:1 fenced", "agent a0 registered"):
        assert line in log
    assert "checkpoint at offset 12" in log  # Sluice's DEBUG lines are kept in the file


def test_verbose_shows_everything_on_the_terminal(tmp_path, capsys, restore_logging) -> None:
    configure_logging(True, tmp_path)
    logging.getLogger("kafka.cluster").error("Metadata refresh failed: Cancelled")
    logging.getLogger("pipelines.stream.task").debug("checkpoint at offset 12")
    terminal = capsys.readouterr().err
    assert "Metadata refresh failed" in terminal and "checkpoint at offset 12" in terminal


def test_a_library_thread_dying_is_logged_to_the_file_not_the_terminal(
    tmp_path, capsys, restore_logging
) -> None:
    path = configure_logging(False, tmp_path)

    def library_io_loop():  # stands in for kafka-python's I/O thread at shutdown
        exec("None.recv()", {"__name__": "kafka.client_async"})

    thread = threading.Thread(target=library_io_loop, name="kafka-python-io")
    thread.start()
    thread.join()
    assert "Traceback" not in capsys.readouterr().err
    log = path.read_text()
    assert "thread kafka-python-io died: AttributeError" in log and "Traceback" in log


def test_a_thread_of_ours_dying_is_shown(tmp_path, capsys, restore_logging) -> None:
    configure_logging(False, tmp_path)

    thread = threading.Thread(  # code whose module is Sluice's (orchestration.control_plane.fleet)
        target=lambda: exec(
            "raise RuntimeError('the control loop broke')",
            {"__name__": "orchestration.control_plane.fleet"},
        ),
        name="control",
    )
    thread.start()
    thread.join()
    terminal = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "thread control died: RuntimeError: the control loop broke" in terminal
