from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.cli import main


def write_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    rows = ["timestamp,value"]
    for i in range(6 * 12):  # 6 hours at 5 minutes, a plateau in the middle
        value = 100 if 24 <= i < 48 else 20
        rows.append(f"{i * 300},{value}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_simulate_prints_json_for_every_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "out.png"
    code = main(
        [
            "autoscale",
            "simulate",
            "--trace",
            str(write_trace(tmp_path)),
            "--partitions",
            "32",
            "--peak-rate",
            "16000",
            "--worker-rate",
            "1000",
            "--sla",
            "600",
            "--json",
            "--plot",
            str(plot),
            "--samples",
            "8",
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    names = [p["policy"] for p in doc["policies"]]
    assert names == ["static", "threshold", "ds2", "keda", "mcts"]
    static = doc["policies"][0]
    assert static["worker_hours"] == pytest.approx(16 * 6, rel=0.02)
    assert doc["settings"]["fleet"]["partitions"] == 32
    for p in doc["policies"]:
        for key in (
            "worker_hours",
            "savings_vs_static",
            "mean_utilisation",
            "sla_violation_minutes",
            "max_lag_s",
            "rescales",
            "decision_mean_ms",
            "decision_p99_ms",
        ):
            assert key in p
    assert plot.stat().st_size > 1000


def test_simulate_table_for_one_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["autoscale", "simulate", "--trace", str(write_trace(tmp_path)), "--policy", "keda"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "keda" in out and "static" in out and "worker-hours" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "/no/such/trace.csv"], "not found"),
        (["--peak-rate", "-3"], "--peak-rate must be a positive number, got -3.0"),
        (["--worker-rate", "0"], "--worker-rate must be a positive number"),
        (["--policy", "magic"], "unknown policy 'magic'"),
    ],
)
def test_bad_input_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    base = ["autoscale", "simulate", "--trace", str(write_trace(tmp_path))]
    code = main(base + args)
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("sluice: error: ") and message in err


def test_bad_csv_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,value\n2020-01-01,1\n2020-01-02,oops\n")
    assert main(["autoscale", "simulate", "--trace", str(bad)]) == 1
    assert "bad value 'oops'" in capsys.readouterr().err


def test_environment_fills_unset_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_AUTOSCALE_FLEET__PARTITIONS", "48")
    code = main(
        [
            "autoscale",
            "simulate",
            "--trace",
            str(write_trace(tmp_path)),
            "--policy",
            "static",
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["settings"]["fleet"]["partitions"] == 48
