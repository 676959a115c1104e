"""More agents than partitions on stateful views: the coordinator splits 4 partitions into 8 and
then 16 key buckets for 6 agents, an agent is SIGKILLed during a split and another after it,
the fleet shrinks and the buckets merge back to 4 tasks; what the views serve equals an oracle
computed from the topic, and the archive lost nothing.

The replay is produced in three parts: half before the agents start, a quarter after the kill
during the split (data arrives while the split goes on), the rest after the kill that follows
it, so both kills land mid-replay however fast the agents read (with everything produced up
front, a loaded machine once finished the replay before the second kill). The oracle is then
read back from the topic while the buckets wait to merge. The events come from the chaos seed
(tests/fixtures/chaos.py)."""

from __future__ import annotations

import signal
import time

import pytest

from quality.lineage import check_nothing_lost
from tests.fixtures.agents import Agents, Fleet, windowed_views
from tests.fixtures.chaos import CHAOS_SEED, replay_hint
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import check_against_oracle, make_stream, tables_of, wait_for_tables

PARTITIONS = 4
EVENTS = 60_000
HOLD_BACK = 0.5
"""The share of the replay not produced before the agents start."""
AFTER_FIRST_KILL = EVENTS // 4
"""What of it is produced after the kill during the split (the rest after the next kill)."""


@pytest.fixture(scope="module")
def bucket_stream(broker, tmp_path_factory):
    return make_stream(
        broker.bootstrap,
        tmp_path_factory.mktemp("views"),
        "vt-events",
        EVENTS,
        PARTITIONS,
        seed=CHAOS_SEED,
        edit_views=windowed_views,
        hold_back=HOLD_BACK,
    )


def test_more_agents_than_partitions_split_and_merge_exactly(
    tmp_path, broker, pg_url, bucket_stream, chaos_seed
):
    """The views' tables (the leader's publisher, the PostgreSQL catalog) equal the oracle
    within a minute, a flush and a publish interval of catch-up, and after the graceful stop."""
    agents = Agents(
        tmp_path,
        broker.bootstrap,
        bucket_stream,
        pg_url,
        SLUICE_MAX_BUCKET_FACTOR="4",
        SLUICE_WORKER_MAX_RATE="1500",  # slow enough that the splits happen mid-replay
        SLUICE_BUCKET_MERGE_DELAY_S="15",  # longer than a killed agent takes to come back
    )
    fleet = Fleet(agents, {}, PARTITIONS)  # the partitions' ends: read back at the end
    tables = tables_of(agents.env)
    try:
        first = ["a0", "a1"]
        for agent_id in first:
            agents.start(agent_id)
        agents.wait_until(lambda: fleet.running(1, first), 60, "4 whole tasks Running", "a0")
        wait_until(lambda: fleet.progress() >= EVENTS * 0.1, 120, "10% of the replay")

        six = [f"a{i}" for i in range(6)]
        for agent_id in six[2:]:
            agents.start(agent_id)
        agents.wait_until(
            lambda: {a.agent_id for a in agents.jobs.agents() if a.state == "running"} >= set(six),
            60,
            "six agents registered",
            "a5",
        )
        # a split under way: some task stopped for it, or the factors mixed
        agents.wait_until(
            lambda: (
                any(a.handoff_to == "@split" for a in fleet.tasks().values())
                or len(fleet.factors()) > 1
            ),
            60,
            "a split under way",
            "a0",
        )
        assert fleet.progress() <= bucket_stream["produced"] < EVENTS  # mid-replay: half is
        assert agents.kill("a1") == -signal.SIGKILL  # during the split; produced after it
        bucket_stream["release"](AFTER_FIRST_KILL)
        fleet.replace("a1")
        agents.wait_until(lambda: fleet.running(4, six), 180, "16 virtual tasks Running", "a0")
        owners = {a.agent_id for a in fleet.tasks().values()}
        assert len(owners) == 6 > PARTITIONS  # more workers than partitions, each with work
        events = agents.jobs.events(limit=2000)
        splits = [e for e in events if e.state == "Retired" and "split" in e.reason]
        # 4 whole tasks, then 8 buckets, each split once: the kill merged nothing back
        assert len(splits) == PARTITIONS * 3, [e.reason for e in splits]

        # the kill after the split lands mid-replay too: the rest is produced after it
        assert fleet.progress() <= bucket_stream["produced"] < EVENTS
        assert agents.kill("a3") == -signal.SIGKILL  # after the split
        bucket_stream["release"]()
        fleet.replace("a3")
        agents.wait_until(lambda: fleet.running(4, six), 120, "16 tasks Running again", "a0")

        for agent_id in six[2:]:  # back to two agents: the buckets merge back
            assert agents.kill(agent_id, signal.SIGTERM) == 0
        fleet.ends = bucket_stream["oracle"]()["ends"]  # while a merge waits its delay
        agents.wait_until(
            lambda: fleet.running(1, first) and fleet.caught_up(),
            240,
            "4 whole tasks Running and caught up",
            "a0",
        )
        caught_up_at = time.monotonic()
        merges = [e for e in agents.jobs.events(limit=4000) if "merged from" in e.reason]
        assert merges, "no merge was recorded"
        took = wait_for_tables(bucket_stream, tables, agents.env, caught_up_at)
        print(f"tables equal the oracle {took:.1f} s after catch-up ({replay_hint()})")
        assert agents.stop_all()["a0"] == 0
        check_against_oracle(bucket_stream, agents.store, agents.control)
        wait_for_tables(bucket_stream, tables, agents.env)  # the stop's last flush and pass
        lineage = check_nothing_lost(agents.store, topic=agents.topic)
        assert lineage and all(h.passed for h in lineage), [h.failures for h in lineage][:3]
    finally:
        tables.close()
        agents.close()
