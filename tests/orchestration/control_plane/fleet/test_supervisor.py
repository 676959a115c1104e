"""The supervisor hands its effective settings to its children explicitly."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.cli.up import UP_DEFAULTS, up_settings
from orchestration.control_plane.fleet import child_environment
from orchestration.control_plane.runtime import Runtime
from pipelines.config import KafkaSettings, SluiceSettings


def test_children_rebuild_exactly_the_parents_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = Runtime(
        SluiceSettings(state_dir=tmp_path / "state", flush_interval_s=7, worker_max_rate=500),
        KafkaSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", sasl_password="pw"),
    )
    env = child_environment(parent)
    for name in list(__import__("os").environ):
        if name.startswith(("SLUICE_", "KAFKA_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    child = SluiceSettings()
    assert child.resolved_state_dir == parent.settings.resolved_state_dir
    assert child.model_dump(exclude={"state_dir"}) == parent.settings.model_dump(
        exclude={"state_dir"}
    )
    kafka = KafkaSettings()
    assert kafka.bootstrap_servers == "127.0.0.1:1"
    assert kafka.sasl_password is not None and kafka.sasl_password.get_secret_value() == "pw"


def test_up_defaults_apply_only_to_options_the_user_left_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SLUICE_FLUSH_INTERVAL_S", "SLUICE_FLEET_SAMPLE_INTERVAL_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLUICE_CHECKPOINT_INTERVAL_S", "30")
    settings = up_settings(SluiceSettings(), flush_interval=None)
    assert settings.checkpoint_interval_s == 30.0
    assert settings.flush_interval_s == UP_DEFAULTS["flush_interval_s"]
    assert settings.fleet_sample_interval_s == UP_DEFAULTS["fleet_sample_interval_s"]
    monkeypatch.setenv("SLUICE_FLUSH_INTERVAL_S", "12")
    assert up_settings(SluiceSettings(), flush_interval=None).flush_interval_s == 12.0
    assert up_settings(SluiceSettings(), flush_interval=3).flush_interval_s == 3.0


def test_up_gives_dagster_the_replays_partitions_and_the_autoscaler(monkeypatch) -> None:
    """nyc_taxi starts 2014-07-01 00:00: a day's replay is that day's 24 hours; the
    autoscaler is on unless --no-autoscale; a variable the user set wins."""
    import argparse

    from orchestration.cli.up import dagster_environment, replay_span

    assert replay_span("nyc_taxi", "1d") == ("2014-07-01-00:00", "2014-07-02-00:00")
    assert replay_span("nyc_taxi", "40m") == ("2014-07-01-00:00", "2014-07-01-01:00")
    for name in ("SLUICE_PARTITIONS_START", "SLUICE_PARTITIONS_END", "SLUICE_AUTOSCALE_SENSOR"):
        monkeypatch.delenv(name, raising=False)
    args = argparse.Namespace(trace="nyc_taxi", duration="1d", no_autoscale=False)
    env = dagster_environment(args, {"SLUICE_TOPIC": "events"})
    assert env["SLUICE_PARTITIONS_END"] == "2014-07-02-00:00"
    assert env["SLUICE_AUTOSCALE_SENSOR"] == "on" and env["SLUICE_TOPIC"] == "events"
    args.no_autoscale = True
    assert dagster_environment(args, {})["SLUICE_AUTOSCALE_SENSOR"] == "off"
    monkeypatch.setenv("SLUICE_PARTITIONS_START", "2014-06-30-00:00")
    assert "SLUICE_PARTITIONS_START" not in dagster_environment(args, {})
