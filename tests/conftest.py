"""Shared fixtures: the embedded broker (one per test session) and isolated Sluice settings."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.config import SluiceSettings
from pipelines.kafka import BrokerInfo, EmbeddedBroker
from tests.fixtures.moto import moto_endpoint  # noqa: F401 - a session fixture for every test

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """A real Kafka-protocol broker (embedded Tansu, or KAFKA_BOOTSTRAP_SERVERS if set)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield BrokerInfo(pid=-1, port=-1, bootstrap=external, started_at=0.0, log_file="")
        return
    embedded = EmbeddedBroker(tmp_path_factory.mktemp("broker"))
    info = embedded.start()
    try:
        yield info
    finally:
        embedded.stop()


_session_state_dir: str | None = None


@pytest.fixture(scope="session", autouse=True)
def isolated_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests that do not name a state directory get one of the session's, not the checkout's
    ``.sluice``: its control store is also the views' tables' catalog, which must not name
    the tables of one test's storage root to the next."""
    if "SLUICE_STATE_DIR" in os.environ:
        yield
        return
    global _session_state_dir
    _session_state_dir = str(tmp_path_factory.mktemp("default-state"))
    os.environ["SLUICE_STATE_DIR"] = _session_state_dir
    from pipelines.config import get_settings

    get_settings.cache_clear()
    try:
        yield
    finally:
        os.environ.pop("SLUICE_STATE_DIR", None)
        get_settings.cache_clear()


@pytest.fixture(autouse=True)
def own_state_dir(isolated_state_dir, tmp_path_factory, monkeypatch) -> Iterator[None]:
    """And each test its own (a test or fixture that sets SLUICE_STATE_DIR keeps its own)."""
    from pipelines.config import get_settings

    if os.environ.get("SLUICE_STATE_DIR") != _session_state_dir:
        yield
        return
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def topic_name() -> str:
    return f"events-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def settings(tmp_path: Path) -> SluiceSettings:
    """Settings isolated under tmp_path, with fast flushes and checkpoints."""
    return SluiceSettings(
        state_dir=tmp_path / "state",
        flush_interval_s=1.0,
        checkpoint_interval_s=2.0,
        status_interval_s=0.5,
    )


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for this test session (see tests/fixtures/postgres.py)."""
    from tests.fixtures.postgres import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def control_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A control store URL of each supported backend: SQLite (one machine) and PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'control.db'}"
    url = request.getfixturevalue("postgres_url")

    from tests.fixtures.postgres import empty_database

    empty_database(url)  # each test starts from an empty store
    return url


TESTS = Path(__file__).resolve().parent
LONGEST_FILES = (
    "e2e/test_up_example.py",
    "orchestration/dagster/test_dagster_e2e.py",
    "e2e/test_agents.py",
    "e2e/test_deadlines.py",
    "e2e/test_up.py",
)
"""The files of 2-10 minutes each (one process), longest first, started first of all: the
flights example is one test, but the longest file of all under the suite's load."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, then the other end-to-end and Spark files (a minute or two
    each), then the rest (stable within each): with workers taking a file at a time
    (scripts/run.sh), a minutes-long file started last would run alone at the end."""

    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
        if path in LONGEST_FILES:
            return LONGEST_FILES.index(path)
        slow = item.get_closest_marker("e2e") or item.get_closest_marker("spark")
        if slow or item.path.parent.name == "e2e":
            return len(LONGEST_FILES)
        return len(LONGEST_FILES) + 1

    items.sort(key=rank)
