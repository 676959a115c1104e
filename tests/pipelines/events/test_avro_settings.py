"""The schema registry's settings: its credentials reach the client and nothing else, masked
in `sluice config`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.cli import main
from pipelines.config import SluiceSettings
from pipelines.events.registry import latest_schema
from pipelines.settings import load_settings
from tests.fixtures.schema_registry import schema_registry

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "event_time", "type": "long"}]}


@pytest.fixture
def no_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sluice.yaml"
    path.write_text("")
    monkeypatch.setenv("SLUICE_CONFIG_FILE", str(path))


def test_registry_credentials_are_masked_in_sluice_config(
    no_settings_file: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_URL", "https://reader:url-s3cret@registry:8081")
    monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_USER_INFO", "reader:info-s3cret")
    assert main(["config", "--json"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out
    rows = {r["variable"]: r for r in json.loads(out)["options"]}
    assert rows["SLUICE_SCHEMA_REGISTRY_USER_INFO"]["value"] == "**********"
    assert rows["SLUICE_SCHEMA_REGISTRY_URL"]["value"].startswith("https://reader:***")
    assert main(["config"]) == 0
    assert "s3cret" not in capsys.readouterr().out


def test_the_user_info_setting_authenticates_the_client(
    no_settings_file: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with schema_registry(user_info="reader:pw") as registry:
        registry.register("t-value", SCHEMA)
        monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_URL", registry.url)
        monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_USER_INFO", "reader:pw")
        conf = load_settings(SluiceSettings).schema_registry_conf()
        assert conf is not None
        assert latest_schema(conf, "t") == (1, SCHEMA)
        monkeypatch.setenv("SLUICE_SCHEMA_REGISTRY_USER_INFO", "reader:wrong")
        wrong = load_settings(SluiceSettings).schema_registry_conf()
        with pytest.raises(Exception, match="Unauthorized") as caught:
            latest_schema(wrong, "t")  # type: ignore[arg-type]
        assert "wrong" not in str(caught.value)
