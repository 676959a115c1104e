"""`sluice views validate | list | schema`: what a user sees, and the exit codes scripts rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from orchestration.cli import main
from pipelines.archive.schema import archive_schema
from pipelines.config import PROJECT_ROOT, get_settings
from pipelines.control import ControlStore
from pipelines.events.declaration import TopicDeclaration
from pipelines.segments import archive_events_key
from tests.fixtures.processes import PROJECT

VIEW = {
    "name": "per_org",
    "topic": "events",
    "grouping_cols": ["org"],
    "interval": "10m",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
}
SESSIONS = {
    "name": "visits",
    "kind": "session",
    "topic": "events",
    "gap": "5m",
    "max_duration": "1h",
    "aggregation_info": [{"aggregation": "count", "aggregated_col_name": "n"}],
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch):
    """A fresh state directory (its SQLite control store) and views file for each test."""
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLUICE_VIEWS_FILE", str(tmp_path / "views.yaml"))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _write(path: Path, *views: dict, at: float | None = None) -> Path:
    path.write_text(yaml.safe_dump({"views": list(views)}))
    if at is not None:
        os.utime(path, (at, at))
    return path


def test_validate_a_good_file_exits_0_with_a_one_line_summary(env, capsys) -> None:
    path = _write(env / "views.yaml", VIEW, SESSIONS)
    assert main(["views", "validate", str(path)]) == 0
    out = capsys.readouterr()
    assert out.out == f"{path}: 2 views valid (1 windowed, 1 session)\n"
    assert out.err == ""


def test_validate_prints_every_mistake_and_exits_2(env, capsys) -> None:
    path = _write(
        env / "views.yaml",
        {**VIEW, "grouping_cols": ["orgz"], "interval": "7m"},
        {**SESSIONS, "max_kept_events": 0},
    )
    assert main(["views", "validate", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        f"{path}: views[0] (per_org).grouping_cols: unknown column 'orgz' (columns of topic "
        "'events': event_id, org, client, bytes_tx, session_id, event_type)",
        f"{path}: views[0] (per_org).interval: 420s does not divide an hour",
        f"{path}: views[1] (visits).max_kept_events: 0 must be an integer in [1, 1000]",
    ]
    assert out.err == f"{path}: 3 errors\n"


def test_validate_json_and_a_file_that_is_not_yaml(env, capsys) -> None:
    path = env / "views.yaml"
    path.write_text("views: [\n")
    assert main(["views", "validate", str(path), "--json"]) == 2
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is False and result["views"] == 0
    assert len(result["errors"]) == 1 and "not valid YAML" in result["errors"][0]
    assert main(["views", "validate", str(env / "missing.yaml")]) == 2
    assert "cannot read view definitions" in capsys.readouterr().out


def test_list_shows_the_views_in_force_with_state_and_source(env, capsys) -> None:
    views_file = _write(
        env / "views.yaml",
        VIEW,
        SESSIONS,
        {**VIEW, "name": "quiet", "disabled": True},
        at=time.time() - 3600,
    )
    control = ControlStore(get_settings().resolved_control_store_url)
    control.deploy_view("per_org", "fp", {**VIEW, "interval": "5m"})  # newer than the file
    control.close()

    assert main(["views", "list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows == {
        "per_org": {
            "name": "per_org",
            "kind": "window",
            "topic": "events",
            "window": "5m",
            "state": "Scheduled",
            "source": "deployment",
        },
        "quiet": {
            "name": "quiet",
            "kind": "window",
            "topic": "events",
            "window": "10m",
            "state": "Disabled",
            "source": f"file {views_file}",
        },
        "visits": {
            "name": "visits",
            "kind": "session",
            "topic": "events",
            "window": "gap 5m, max 1h",
            "state": "Enabled",
            "source": f"file {views_file}",
        },
    }

    assert main(["views", "list", "--views", str(views_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "name" in line)
    assert header.split() == ["name", "kind", "topic", "window", "state", "source"]
    per_org = next(line for line in lines if "per_org" in line)
    assert per_org.split() == ["per_org", "window", "events", "5m", "Scheduled", "deployment"]
    visits = next(line for line in lines if "visits" in line)
    assert visits.split()[:7] == ["visits", "session", "events", "gap", "5m,", "max", "1h"]
    topic = lines.index(next(line for line in lines if line.startswith("Topic ")))
    assert lines[topic].split() == ["Topic", "events", "(json,", "id", "event_id)"]
    columns = [line.split()[:2] for line in lines[topic + 4 :] if line.strip()]
    assert columns[:3] == [["event_time", "timestamp"], ["event_id", "string"], ["org", "string"]]


def test_schema_prints_the_shipped_schema_file(tmp_path) -> None:
    """In a process of its own: this one's registry may hold aggregations tests registered
    (tests/fixtures/poison.py), which a schema printed here would list too."""
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_AGGREGATOR_MODULES"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "views", "schema"],
        env={**env, "PYTHONPATH": str(PROJECT), "SLUICE_STATE_DIR": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (PROJECT_ROOT / "data" / "views.schema.json").read_text()


def test_every_views_command_has_help_with_examples(env, capsys) -> None:
    for command in ("validate", "list", "schema"):
        with pytest.raises(SystemExit) as done:
            main(["views", command, "--help"])
        assert done.value.code == 0
        assert f"sluice views {command}" in capsys.readouterr().out.split("examples:")[1]


def test_list_shows_a_topic_s_record_and_derived_columns() -> None:
    from orchestration.cli.views import declaration_rows
    from pipelines.events.declaration import TopicDeclaration

    declaration = TopicDeclaration.model_validate(
        {
            "topic": "payments",
            "fields": [{"name": "merchant", "type": "string"}],
            "record": {"key": "card", "headers": {"region": "x-region"}},
            "derived": [
                {"name": "merchant_lc", "expr": "lower(merchant)"},
                {"name": "card_uc", "expr": "upper(card)"},
                {"name": "hour_of_day", "expr": "hour(event_time)"},
            ],
        }
    )
    assert declaration_rows(declaration)[2:] == [
        ("card", "string", "from the record"),
        ("region", "string", "from the record"),
        ("merchant_lc", "string", "derived: lower(merchant)"),
        ("card_uc", "string", "derived: upper(card), nullable"),
        ("hour_of_day", "long", "derived: hour(event_time)"),
    ]


PAYMENTS_FIELDS = [
    {"name": "merchant", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "cents", "type": "long", "nullable": True},
]
REVENUE = {
    "name": "revenue",
    "topic": "payments",
    "grouping_cols": ["merchant"],
    "interval": "1h",
    "aggregation_info": [
        {"aggregation": "sum", "col_name": "amount", "aggregated_col_name": "revenue"}
    ],
}


def _declaring(path: Path, fields: list[dict]) -> Path:
    document = {"topics": [{"topic": "payments", "fields": fields}], "views": [REVENUE]}
    path.write_text(yaml.safe_dump(document))
    return path


def test_validate_deployed_refuses_what_a_deploy_would(env, capsys) -> None:
    """``--deployed`` holds the file's declarations to the deployed views and the archive."""
    control = ControlStore(get_settings().resolved_control_store_url)
    top = {**REVENUE, "name": "top_cents"}
    top["aggregation_info"] = [
        {"aggregation": "max", "col_name": "cents", "aggregated_col_name": "t"}
    ]
    control.deploy_view("top_cents", "fp", top)
    control.close()
    path = _declaring(env / "payments.yaml", PAYMENTS_FIELDS[:2])  # cents removed
    assert main(["views", "validate", str(path)]) == 0  # the file alone is valid
    capsys.readouterr()
    assert main(["views", "validate", str(path), "--deployed"]) == 2
    out = capsys.readouterr().out
    assert "declaration change refused: deployed views no longer read with it" in out
    assert "deployed view top_cents" in out and "unknown column 'cents'" in out

    declared = TopicDeclaration.model_validate({"topic": "payments", "fields": PAYMENTS_FIELDS})
    schema = archive_schema(declared)
    archived = get_settings().resolved_storage_root
    key = Path(archived) / archive_events_key(
        1_700_000_000_000 // 3_600_000 * 3_600_000, "payments", 0, 0, 1
    )
    key.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({f.name: pa.nulls(0, f.type) for f in schema}, schema), key)
    retyped = [{**f, "type": "long"} if f["name"] == "amount" else f for f in PAYMENTS_FIELDS]
    assert main(["views", "validate", str(_declaring(path, retyped)), "--deployed"]) == 2
    out = capsys.readouterr().out
    assert "column 'amount' is double in the archive's newest hour, declared long now" in out
    assert main(["views", "validate", str(_declaring(path, PAYMENTS_FIELDS)), "--deployed"]) == 0
