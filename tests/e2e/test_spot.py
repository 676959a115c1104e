"""Spot interruptions end to end: agents on a replay, named by the instance ids of a moto Auto
Scaling group; one gets an interruption notice from its instance metadata (IMDSv2), another's
instance is evacuated by the Dagster job the SQS sensor launches. (moto has no
CompleteLifecycleAction; that call is checked against botocore's API model in
tests/orchestration/control_plane/autoscaling/test_autoscale_realizers.py.) Each one's tasks run
elsewhere well before AWS's two minutes, the agent is then SIGKILLed as the instance would be, and
the views equal the oracle: nothing lost, nothing counted twice; so do their tables, which the
leading agent's publisher commits."""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from orchestration.jobs.recovery import evacuate_spot_instance
from orchestration.resources.control import LocalControlStoreResource
from orchestration.resources.fleet import LocalFleetResource
from tests.fixtures.imds import FakeImds
from tests.fixtures.moto import auto_scaling_group, aws_test_credentials
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import check_against_oracle, tables_of, wait_for_tables

pytestmark = [pytest.mark.e2e, pytest.mark.broker]

AWS_WARNING_S = 120.0


def _moved_off(agents, agent_id: str, held: dict[str, int]) -> bool:
    now = agents.assignments()
    return all(
        now[t].state == "Running" and now[t].agent_id != agent_id and now[t].generation > g
        for t, g in held.items()
    )


def _settled(agents, on: list[str]) -> bool:
    """Every task Running on ``on``, their loads within one task: no balancing to come."""
    if not agents.all_running(on):
        return False
    load = Counter(a.agent_id for a in agents.assignments().values())
    return max(load[x] for x in on) - min(load[x] for x in on) <= 1


def test_both_notice_paths_move_the_work_before_the_instance_goes(
    agents_factory, agents_stream, tmp_path, moto_endpoint, monkeypatch
) -> None:
    aws_test_credentials(monkeypatch)
    with auto_scaling_group(moto_endpoint) as group:
        autoscaling = boto3.client(
            "autoscaling", region_name="us-east-1", endpoint_url=moto_endpoint
        )
        autoscaling.set_desired_capacity(AutoScalingGroupName=group.group_name, DesiredCapacity=3)
        instances = sorted(
            i["InstanceId"]
            for i in autoscaling.describe_auto_scaling_groups(
                AutoScalingGroupNames=[group.group_name]
            )["AutoScalingGroups"][0]["Instances"]
        )
        assert len(instances) == 3
        monkeypatch.setenv("SLUICE_AUTOSCALE_AWS__ENDPOINT_URL", moto_endpoint)
        url = f"sqlite:///{tmp_path / 'control.db'}"
        agents = agents_factory(url, SLUICE_WORKER_MAX_RATE="2500")
        with FakeImds(instances[0]) as imds:
            for instance in instances:
                extra = {"SLUICE_SPOT_POLL_INTERVAL_S": "0.5"}
                if instance == instances[0]:
                    extra["SLUICE_SPOT_IMDS_URL"] = imds.url
                agents.start(instance, **extra)
            wait_until(lambda: agents.all_running(instances), 60, "every task on three agents")
            wait_until(lambda: agents.progress() > 20_000, 120, "some progress")

            # 1. the agent's own notice, from its instance metadata
            doomed = instances[0]
            held = {
                a.task: a.generation for a in agents.assignments().values() if a.agent_id == doomed
            }
            assert held
            deadline = datetime.now(UTC) + timedelta(seconds=AWS_WARNING_S)
            noticed = time.monotonic()
            imds.interrupt(deadline.strftime("%Y-%m-%dT%H:%M:%SZ"))
            wait_until(lambda: _moved_off(agents, doomed, held), AWS_WARNING_S, "the IMDS path")
            imds_s = time.monotonic() - noticed
            assert agents.jobs.agents()[0].state == "draining"
            reasons = [e.reason for e in agents.jobs.events(limit=5000) if e.agent_id == doomed]
            assert any("spot interruption notice" in r for r in reasons)
            assert agents.kill(doomed) == -signal.SIGKILL  # the instance goes

        # 2. the central path: the run the sensor starts for a lifecycle-hook notice. First
        # the fleet settles: the drain's hand-offs may leave the survivors' loads uneven, and
        # a balancing hand-off after `held` is read would move a task off on its own.
        wait_until(lambda: _settled(agents, instances[1:]), 120, "the two survivors balanced")
        doomed = instances[1]
        held = {a.task: a.generation for a in agents.assignments().values() if a.agent_id == doomed}
        assert held
        started = time.monotonic()
        result = evacuate_spot_instance.execute_in_process(
            run_config={
                "ops": {
                    "evacuate_instance_op": {
                        "config": {
                            "instance_id": doomed,
                            "kind": "terminating",
                            "reason": "lifecycle hook",
                            "wait_s": AWS_WARNING_S,
                        }
                    }
                }
            },
            resources={
                "control_store": LocalControlStoreResource(sqlite_url=url),
                "fleet": LocalFleetResource(control_store_url=url, timeout_s=10),
            },
        )
        central_s = time.monotonic() - started
        assert result.success
        (output,) = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
        metadata = {k: v.value for k, v in output.event_specific_data.metadata.items()}
        assert metadata["changed"] == ", ".join(sorted(held))
        assert set(metadata["seconds_to_running_elsewhere"]) == set(held)
        assert metadata["slowest_s"] < AWS_WARNING_S
        history = {t: agents.jobs.events(t, limit=50) for t in held}
        assert _moved_off(agents, doomed, held), (held, agents.assignments(), history)
        assert agents.kill(doomed) == -signal.SIGKILL

        survivor = instances[2]
        wait_until(
            lambda: agents.caught_up() and agents.all_running([survivor]),
            240,
            "the survivor to catch up",
        )
        caught_up_at = time.monotonic()
        print(f"IMDS notice -> running elsewhere: {imds_s:.1f} s; central: {central_s:.1f} s")
        tables = tables_of(agents.env)
        try:  # the survivor leads at the end: its publisher committed every agent's hours
            took = wait_for_tables(agents_stream, tables, agents.env, caught_up_at)
            print(f"tables equal the oracle {took:.1f} s after catch-up")
            assert agents.stop_all()[survivor] == 0
            wait_for_tables(agents_stream, tables, agents.env)  # the stop's last flush and pass
        finally:
            tables.close()
        check_against_oracle(agents_stream, agents.store, agents.control)
