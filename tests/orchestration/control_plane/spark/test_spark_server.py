"""The warm Spark Connect server: started with the project's Spark settings, its health and
memory shown, stopped by PID without leftovers."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from orchestration.control_plane.processes import live_processes
from orchestration.control_plane.spark.server import CONNECT_SERVER_CLASS, server_command
from pipelines.batch import SparkSettings, spark_conf
from pipelines.kafka.embedded import pid_alive
from tests.fixtures.processes import wait_until
from tests.fixtures.spark_connect import sluice_spark, warm_spark_server

pytestmark = pytest.mark.spark


def test_the_server_gets_the_sessions_settings_on_loopback() -> None:
    settings = SparkSettings(master="local[1]", shuffle_partitions=3, conf={"spark.x.y": "z"})
    command = server_command(settings, 15123)
    assert command[1:3] == ["--class", CONNECT_SERVER_CLASS]
    assert command[command.index("--master") + 1] == "local[1]"
    confs = {c for flag, c in itertools.pairwise(command) if flag == "--conf"}
    wanted = {f"{k}={v}" for k, v in spark_conf(settings).items() if k != "spark.app.name"}
    assert wanted - {"spark.master=local[1]"} <= confs
    assert {"spark.connect.grpc.binding.address=127.0.0.1"} <= confs
    assert "spark.connect.grpc.binding.port=15123" in confs


def test_start_status_and_stop_by_pid(tmp_path) -> None:
    """Its restart after a SIGKILL, under a correction, is in the Dagster e2e
    (test_a_backfill_recorrects_an_hour_even_with_the_warm_server_killed_under_it)."""
    state = tmp_path / "state"
    assert sluice_spark(state, "status").returncode == 3  # nothing yet
    with warm_spark_server(state) as server:
        status = sluice_spark(state, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        health = json.loads(status.stdout)
        assert health["running"] and health["url"].startswith("sc://127.0.0.1:")
        assert health["rss_mb"] > 50 and health["restarts"] == 0
        again = sluice_spark(state, "start", "--json")  # one per state dir: the same again
        assert json.loads(again.stdout)["pid"] == health["pid"]
        info = server.info()
        assert info is not None and info.pid == health["pid"]
    assert not pid_alive(info.keeper_pid) and not pid_alive(info.pid)
    assert not (state / "spark-connect.json").exists()
    assert sluice_spark(state, "status").returncode == 3


def _warming_up(url: str) -> list[int]:
    """PIDs of warm-up processes aimed at ``url``."""
    return [
        p.pid
        for p in live_processes()
        if b"orchestration.control_plane.spark.warmup" in (command := p.cmdline())
        and url.encode() in command
    ]


def test_a_new_server_warms_up_beside_it_and_leaves_nothing(tmp_path) -> None:
    """The keeper corrects synthetic events on each new JVM in a process of its own, which
    removes its scratch directory when done, and is stopped with the keeper when not."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"SLUICE_SPARK_WARM_UP": "true", "TMPDIR": str(scratch)}
    state = tmp_path / "state"
    with warm_spark_server(state, env) as server:
        url = server.info().url
        log = state / "logs" / "spark-warm-up.log"
        wait_until(lambda: log.exists() and "warmed up in" in log.read_text(), 240, "warm-up")
        wait_until(lambda: not _warming_up(url), 30, "the warm-up process to end")
        assert not list(scratch.glob("sluice-warm-up-*"))
    stopped = tmp_path / "stopped"
    with warm_spark_server(stopped, env) as server:  # stopped while it warms up
        url = server.info().url
        wait_until(lambda: _warming_up(url), 60, "a warm-up process")
    wait_until(lambda: not _warming_up(url), 15, "no warm-up process left after the stop")


_SHARING = """
import json, sys
from pathlib import Path
from orchestration.control_plane.spark.session import open_session
from orchestration.control_plane.spark.server import SparkConnectServer

url, said = sys.argv[1], []
renew = SparkConnectServer(Path(sys.argv[2])).renew_session
first = open_session(url, renew, said.append)
first.conf.set("spark.sluice.test.marker", "first")
first.range(3).createOrReplaceTempView("leftover")
first.catalog.cacheTable("leftover")  # as a correction killed mid-way leaves it
first.stop()
second = open_session(url, renew, said.append)
seen = {"marker": second.conf.get("spark.sluice.test.marker")}
seen["cached"] = second.catalog.isCached("leftover")
second.release_session_on_close = True
second.stop()  # released: the server refuses the id from now on
third = open_session(url, renew, said.append)
seen["marker_after"] = third.conf.get("spark.sluice.test.marker", "none")
third.release_session_on_close = True
third.stop()
print(json.dumps({**seen, "said": said}))
"""


def test_corrections_share_one_session_and_a_refused_one_is_renewed(tmp_path) -> None:
    """In a process of its own, as the correction job: pyspark keeps a remote URL in its
    builders' shared options and in os.environ, and a later local session here would fail."""
    from orchestration.control_plane.spark.session import session_id_of

    state = tmp_path / "state"
    with warm_spark_server(state) as server:
        health = server.health()
        assert health.session_id and session_id_of(str(health.session_url)) == health.session_id
        done = subprocess.run(
            [sys.executable, "-c", _SHARING, str(health.session_url), str(state)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["marker"] == "first"  # the second correction found the first's session
        assert seen["cached"] is False  # ... without what it cached
        renewed = server.health().session_id
        assert renewed and renewed != health.session_id  # the refused id was replaced
        assert seen["marker_after"] == "none"  # in a new session
        assert any(health.session_id[:8] in s and renewed[:8] in s for s in seen["said"]), seen
