"""With the broker gone, the supervisor's lag probe (end offsets and the newest records,
`orchestration/control_plane/lag.py`) must not block in kafka-python's ``end_offsets`` for good (it
did, and hung the supervisor): it answers, or raises BrokerUnavailable, within its deadline
(SLUICE_KAFKA_TIMEOUT_S, here 1 s), against a broker killed, a broker hung (SIGSTOP) and a black
hole (accepts connections, never answers)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from orchestration.control_plane.lag import ProducedProbe
from pipelines.config import KafkaSettings
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka import EmbeddedBroker, ensure_topics, partitions_of
from tests.fixtures.blackhole import BlackHole

pytestmark = pytest.mark.broker

TIMEOUT_S = 1.0
PROBE_POLL_S = 2.0
"""How long the probe polls for the newest records after the end offsets (lag.py)."""


@pytest.fixture
def own_broker(tmp_path: Path):
    embedded = EmbeddedBroker(tmp_path / "broker")
    info = embedded.start()
    ensure_topics(info.bootstrap, {"events": 2})
    yield info
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGCONT)
    embedded.stop()


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_the_lag_probe_answers_within_its_deadline_when_the_broker_goes(own_broker, how) -> None:
    kafka = KafkaSettings(bootstrap_servers=own_broker.bootstrap, timeout_s=TIMEOUT_S)
    probe = ProducedProbe(own_broker.bootstrap, kafka)
    try:
        assert probe.newest("events", [0, 1]) == {0: (0, None), 1: (0, None)}
        os.kill(own_broker.pid, how)
        started = time.monotonic()
        with contextlib.suppress(BrokerUnavailable):
            probe.newest("events", [0, 1])
        took = time.monotonic() - started
    finally:
        probe.close()
    assert took <= TIMEOUT_S + PROBE_POLL_S + 1.0, f"the probe took {took:.1f} s"


def test_the_lag_probe_gives_up_on_a_black_hole_within_its_deadline() -> None:
    hole = BlackHole()
    try:
        probe = ProducedProbe(hole.address, KafkaSettings(timeout_s=TIMEOUT_S))
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            probe.newest("events", [0, 1])
        took = time.monotonic() - started
        probe.close()
    finally:
        hole.close()
    assert hole.held, "the probe never reached the black hole"
    assert took <= TIMEOUT_S + 1.0, f"the probe took {took:.1f} s"


def test_asking_a_hung_broker_for_partitions_gives_up_within_its_deadline(own_broker) -> None:
    kafka = KafkaSettings(timeout_s=TIMEOUT_S)
    assert partitions_of(own_broker.bootstrap, kafka, "events") == [0, 1]
    os.kill(own_broker.pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable):
        partitions_of(own_broker.bootstrap, kafka, "events")
    took = time.monotonic() - started
    assert took <= 2 * TIMEOUT_S + 0.5, f"took {took:.1f} s"
