"""Bad settings and unreachable stores: one line naming the setting, no traceback, no secret."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from tests.fixtures.processes import PROJECT


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sluice(tmp_path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": str(PROJECT),
            "SLUICE_STATE_DIR": str(tmp_path / "state"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unreachable_control_store_is_one_line_without_its_password(tmp_path) -> None:
    url = f"postgresql+psycopg://sluice:s3cret-pw@127.0.0.1:{_closed_port()}/sluice"
    done = _sluice(tmp_path, {"SLUICE_CONTROL_STORE_URL": url}, "status", "--once")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "SLUICE_CONTROL_STORE_URL" in lines[0] and "refused" in lines[0]
    assert "s3cret-pw" not in done.stderr + done.stdout and "Traceback" not in done.stderr


def test_an_unreachable_bucket_is_one_line_naming_the_setting(tmp_path) -> None:
    env = {
        "SLUICE_STORAGE_ROOT": "s3://no-such-bucket/sluice",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    done = _sluice(
        tmp_path,
        env,
        "query",
        "traffic_by_org",
        "--start",
        "2014-07-01T08:00",
        "--end",
        "2014-07-01T09:00",
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SLUICE_STORAGE_ROOT" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_wrong_setting_value_is_one_line_and_exit_2(tmp_path) -> None:
    done = _sluice(tmp_path, {"SLUICE_FLUSH_INTERVAL_S": "often"}, "status", "--once")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SLUICE_FLUSH_INTERVAL_S" in lines[0], done.stderr


def test_version(tmp_path) -> None:
    done = _sluice(tmp_path, {}, "--version")
    assert done.returncode == 0 and done.stdout.startswith("sluice ")


def test_help_shows_defaults_and_examples() -> None:
    import argparse

    from orchestration.cli import build_parser
    from orchestration.cli.help import EXAMPLES

    parser = build_parser()
    commands = {}

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        commands[path] = p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())

    walk(parser, "")
    for path in EXAMPLES:
        text = commands[path].format_help()
        assert "examples:" in text and f"sluice {path}" in text, path
    for path, sub in commands.items():
        assert "(default: None)" not in sub.format_help(), path
    assert "(default: 480.0)" in commands["up"].format_help()


def test_broker_status_as_json(tmp_path) -> None:
    """Scripts read the broker's state from one JSON object; the exit code stays the same."""
    done = _sluice(tmp_path, {}, "broker", "status", "--json")
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout) == {"running": False, "managed": True}
    foreign = _sluice(
        tmp_path, {"KAFKA_BOOTSTRAP_SERVERS": "b1:9092"}, "broker", "status", "--json"
    )
    assert foreign.returncode == 0, foreign.stderr
    assert json.loads(foreign.stdout) == {"running": None, "managed": False, "bootstrap": "b1:9092"}


def test_a_granularity_a_view_cannot_roll_up_to_is_one_line(tmp_path) -> None:
    """`sluice query VIEW --granularity`: not a multiple of the interval, a sliding view."""
    env = {"SLUICE_STORAGE_ROOT": str(tmp_path / "storage")}
    cases = [
        ("traffic_by_org", "7m", "granularity 7m must be a multiple of the view's interval 10m"),
        ("transfers_last_hour", "1d", "transfers_last_hour has sliding windows"),
    ]
    for view, granularity, message in cases:
        done = _sluice(
            tmp_path,
            env,
            "query",
            view,
            "--start",
            "2014-07-01T00:00",
            "--end",
            "2014-07-02T00:00",
            "--granularity",
            granularity,
        )
        assert done.returncode == 1, done.stderr  # a QueryError, as for a bad range
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = _sluice(
        tmp_path,
        env,
        "query",
        "traffic_by_org",
        "--start",
        "2014-07-01T00:00",
        "--end",
        "2014-07-02T00:00",
        "--granularity",
        "1d",
        "--format",
        "json",
    )
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
