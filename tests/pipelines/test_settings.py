"""Every option: one typed model, environment over settings file over default, one-line errors."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from orchestration.cli import main
from orchestration.control_plane.autoscaling.config import AutoscaleSettings
from orchestration.control_plane.settings import DagsterSettings
from pipelines.config import KafkaSettings, SluiceSettings
from pipelines.exceptions import InvalidSetting
from pipelines.settings import load_settings, option_rows

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_MODULES = {
    "pipelines/settings.py",
    "pipelines/config.py",
    "pipelines/batch/config.py",
    "quality/config.py",
    "quality/expectations.py",
    "orchestration/control_plane/settings.py",
    "orchestration/control_plane/autoscaling/config.py",
}


@pytest.fixture
def settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sluice.yaml"
    path.write_text("")
    monkeypatch.setenv("SLUICE_CONFIG_FILE", str(path))
    for name in ("SLUICE_TOPIC", "SLUICE_FLUSH_INTERVAL_S", "KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(name, raising=False)
    return path


def test_the_environment_wins_over_the_file_which_wins_over_the_default(
    settings_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings_file.write_text(
        "SLUICE_TOPIC: clicks\nSLUICE_FLUSH_INTERVAL_S: 30\nKAFKA_BOOTSTRAP_SERVERS: b1:9092\n"
    )
    monkeypatch.setenv("SLUICE_FLUSH_INTERVAL_S", "7")
    settings = load_settings(SluiceSettings)
    assert settings.topic == "clicks"
    assert settings.flush_interval_s == 7.0
    assert settings.checkpoint_interval_s == 60.0
    assert load_settings(KafkaSettings).bootstrap_servers == "b1:9092"
    sources = {r.variable: r.source for r in option_rows(settings)}
    assert sources["SLUICE_TOPIC"] == f"file {settings_file.resolve()}"
    assert sources["SLUICE_FLUSH_INTERVAL_S"] == "environment"
    assert sources["SLUICE_CHECKPOINT_INTERVAL_S"] == "default"


def test_secrets_and_url_passwords_are_masked(
    settings_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_KAFKA_SASL_PASSWORD", "hunter2")
    monkeypatch.setenv("SLUICE_CONTROL_STORE_URL", "postgresql://sluice:s3cret@db:5432/sluice")
    shown = {
        r.variable: r.value
        for model in (SluiceSettings, KafkaSettings)
        for r in option_rows(load_settings(model))
    }
    assert shown["SLUICE_KAFKA_SASL_PASSWORD"] == "**********"
    assert "s3cret" not in shown["SLUICE_CONTROL_STORE_URL"]
    assert shown["SLUICE_CONTROL_STORE_URL"].startswith("postgresql://sluice:***")


@pytest.mark.parametrize(
    ("model", "variable", "value", "allowed"),
    [
        (SluiceSettings, "SLUICE_PARTITIONS", "four", "valid integer"),
        (SluiceSettings, "SLUICE_FLUSH_INTERVAL_S", "0.1", "greater than or equal to 1"),
        (SluiceSettings, "SLUICE_MAX_BUCKET_FACTOR", "6", "power of two"),
        (SluiceSettings, "SLUICE_MAX_BUCKET_FACTOR", "128", "less than or equal to 64"),
        (AutoscaleSettings, "SLUICE_AUTOSCALE_FLEET__MAX_BUCKET_FACTOR", "3", "power of two"),
        (DagsterSettings, "SLUICE_ENV", "staging", "'local' or 'prod'"),
        (DagsterSettings, "SLUICE_REPORT_CRON", "every day", "not a cron expression"),
        (DagsterSettings, "SLUICE_PARTITIONS_START", "July", "YYYY-MM-DD-HH:MM"),
    ],
)
def test_a_bad_value_is_one_line_naming_variable_value_and_rule(
    settings_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: type,
    variable: str,
    value: str,
    allowed: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{variable}={value!r}" in err and allowed in err
    with pytest.raises(InvalidSetting, match=variable):
        load_settings(model)


def test_a_bad_value_in_the_settings_file_names_it_too(
    settings_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings_file.write_text("SLUICE_MAX_MESSAGE_BYTES: tiny\n")
    assert main(["config"]) == 2
    assert "SLUICE_MAX_MESSAGE_BYTES='tiny'" in capsys.readouterr().err


def test_a_missing_settings_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLUICE_CONFIG_FILE", str(tmp_path / "nope.yaml"))
    assert main(["config"]) == 2
    assert "SLUICE_CONFIG_FILE=" in capsys.readouterr().err


def test_sluice_config_lists_every_model_and_where_values_came_from(
    settings_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings_file.write_text("SLUICE_TOPIC: clicks\n")
    monkeypatch.setenv("SLUICE_AUTOSCALE_MCTS__SAMPLES", "64")
    assert main(["config", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {r["variable"]: r for r in payload["options"]}
    assert payload["settings_file"] == str(settings_file.resolve())
    assert rows["SLUICE_TOPIC"]["value"] == "clicks" and rows["SLUICE_TOPIC"]["source"].startswith(
        "file"
    )
    assert rows["SLUICE_AUTOSCALE_MCTS__SAMPLES"] == {
        **rows["SLUICE_AUTOSCALE_MCTS__SAMPLES"],
        "value": "64",
        "source": "environment",
    }
    groups = {r["group"] for r in payload["options"]}
    assert len(groups) >= 6
    assert all(r["description"] for r in payload["options"]), "every option is documented"
    for name in (
        "SLUICE_SPARK_MASTER",
        "SLUICE_ENV",
        "SLUICE_REPORT_CRON",
        "KAFKA_BOOTSTRAP_SERVERS",
    ):
        assert name in rows


def _environ_reads(tree: ast.AST) -> list[str]:
    """``os.environ.get("SLUICE_...")``, ``os.environ["SLUICE_..."]``, ``os.getenv("SLUICE_...")``."""
    found = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv", "os.environ.setdefault", "environ.get"):
                target = node.args[0].value
        elif (
            isinstance(node, ast.Subscript)
            and ast.unparse(node.value) == "os.environ"
            and isinstance(node.slice, ast.Constant)
        ):
            target = node.slice.value
        if isinstance(target, str) and (
            target.startswith("SLUICE_") or target.startswith("KAFKA_")
        ):
            found.append(f"{target} (line {node.lineno})")
    return found


def test_no_option_is_read_from_the_environment_outside_the_settings_modules() -> None:
    offenders = {}
    for package in ("pipelines", "quality", "assets", "orchestration"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in SETTINGS_MODULES:
                continue
            if reads := _environ_reads(ast.parse(path.read_text())):
                offenders[rel] = reads
    assert offenders == {}


def test_docs_settings_md_is_generated_from_the_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./sluice.yaml; defaults never read the environment
    monkeypatch.delenv("SLUICE_CONFIG_FILE", raising=False)
    assert main(["config", "--defaults", "--format", "markdown"]) == 0
    generated = capsys.readouterr().out
    assert generated == (ROOT / "docs" / "settings.md").read_text(), (
        "docs/settings.md is stale: .venv/bin/sluice config --defaults --format markdown "
        "> docs/settings.md"
    )
