"""One Spark Connect session for every correction on the warm server, not a new one per run.

A new session starts cold on the server: its own class loader for the generated code, a
plan cache to fill, a Python worker daemon if anything needs one, so a correction in a new
session runs markedly slower than one that reuses the session before it (docs/benchmarks.md).
So the keeper names a session per JVM (:attr:`ServerInfo.session_id
<orchestration.control_plane.spark.server.ServerInfo>`), the Dagster launch passes it in the URL
(``sc://127.0.0.1:PORT/;session_id=UUID``), and the job connects to it, clears what a killed
run may have left cached, and leaves it open on the server when done.

A session the server no longer knows (closed by a client, or idle past the server's timeout)
refuses the id for good: the job then asks the keeper's record for a new one, so the next runs
share that one, and says so in the run's log.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SESSION_PARAM", "open_session", "server_url", "session_id_of", "session_url"]

log = logging.getLogger(__name__)

SESSION_PARAM = "session_id"
"""Spark Connect's connection-string parameter naming the session to attach to."""


def server_url(url: str) -> str:
    """The server's address of a connection string, without its parameters."""
    return url.partition("/;")[0]


def session_url(url: str, session_id: str | None) -> str:
    """``url`` naming ``session_id`` (as is without one)."""
    return f"{url.rstrip('/')}/;{SESSION_PARAM}={session_id}" if session_id else url


def session_id_of(url: str) -> str | None:
    """The session a connection string names, or None (then every client gets its own)."""
    for param in url.partition("/;")[2].split(";"):
        name, _, value = param.partition("=")
        if name == SESSION_PARAM and value:
            return value
    return None


def _refused(exc: BaseException) -> bool:
    """The server knows the session id no more: closed, or expired while idle."""
    text = str(exc)
    return "INVALID_HANDLE" in text and ("SESSION_CLOSED" in text or "SESSION_NOT_FOUND" in text)


def _connect(url: str) -> SparkSession:
    from pyspark.sql import SparkSession

    # create(), not getOrCreate(): a refused session must not come back as the default one
    spark = SparkSession.builder.remote(url).create()
    try:
        spark.conf.get("spark.sql.shuffle.partitions")  # the first round trip: is it known?
    except Exception:
        # closed, or its exit hook retries a cleanup against the server for minutes
        with suppress(Exception):
            spark.client.close()
        raise
    return spark


def open_session(
    url: str,
    renew: Callable[[str], str | None] | None = None,
    say: Callable[[str], object] = log.info,
) -> SparkSession:
    """A session on the server at ``url``: the shared one it names, else one of its own.

    When the server refuses the shared id, ``renew(refused)`` (the keeper's record:
    :meth:`SparkConnectServer.renew_session
    <orchestration.control_plane.spark.server.SparkConnectServer.renew_session>`) names the one to
    share from now on. A shared session is left open by ``stop()`` and starts without cached data.
    ``say`` tells the run's log what happened.
    """
    shared = session_id_of(url)
    if shared is None:
        return _connect(url)
    try:
        spark = _connect(url)
    except Exception as exc:
        if not _refused(exc):
            raise
        renewed = (renew(shared) if renew is not None else None) or str(uuid.uuid4())
        say(
            f"the shared Spark session {shared[:8]} is closed on the server (idle past its "
            f"timeout, or released); corrections share {renewed[:8]} from now on"
        )
        url = session_url(server_url(url), renewed)
        spark = _connect(url)
    spark.release_session_on_close = False  # stop() closes the connection, not the session
    spark.catalog.clearCache()  # what a killed correction persisted stays otherwise
    return spark
