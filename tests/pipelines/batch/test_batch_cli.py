"""`sluice batch correct`: argument checks without Spark, and one real correction."""

from __future__ import annotations

import pytest

from orchestration.cli import main
from orchestration.cli.batch import parse_hour, select_views
from pipelines.batch import InvalidHour, UnknownView
from pipelines.config import PROJECT_ROOT, get_settings
from pipelines.generator import GeneratorOptions
from pipelines.segments import hour_label, parse_hour_label
from pipelines.serving.older_layout import published_key
from pipelines.tables import TablesConfig, ViewTables
from pipelines.testing import StreamRun, run_stream
from pipelines.views import load_views

VIEWS_FILE = PROJECT_ROOT / "data" / "views.yaml"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> StreamRun:
    root = tmp_path_factory.mktemp("batch-cli") / "storage"
    return run_stream(root, load_views(VIEWS_FILE), options=GeneratorOptions(max_events=1500))


@pytest.fixture
def env(monkeypatch, small_run, tmp_path):
    monkeypatch.setenv("SLUICE_STORAGE_ROOT", small_run.store.root)
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLUICE_VIEWS_FILE", str(VIEWS_FILE))
    get_settings.cache_clear()
    yield small_run
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2015-02-26T21", parse_hour_label("2015-02-26T21")),
        ("2015-02-26T21:00Z", parse_hour_label("2015-02-26T21")),
        ("2015-02-26T23:00+02:00", parse_hour_label("2015-02-26T21")),
        (str(parse_hour_label("2015-02-26T21")), parse_hour_label("2015-02-26T21")),
    ],
)
def test_parse_hour(text, expected):
    assert parse_hour(text, "--hour") == expected


@pytest.mark.parametrize("text", ["2015-02-26T21:30", "yesterday", "1800000"])
def test_parse_hour_rejects_what_is_not_an_hour(text):
    with pytest.raises(InvalidHour, match=text):
        parse_hour(text, "--hour")


def test_unknown_view_names_are_listed():
    views = load_views(VIEWS_FILE)
    with pytest.raises(UnknownView, match=r"nope.*traffic_by_org"):
        select_views(views, "traffic_by_org,nope")
    assert [v.name for v in select_views(views, " top_clients_hourly ,traffic_by_org")] == [
        "top_clients_hourly",
        "traffic_by_org",
    ]


def test_an_hour_without_archive_is_an_error(env, capsys):
    assert main(["batch", "correct", "--hour", "2015-03-10T05", "--to", "2015-03-10T07"]) == 1
    err = capsys.readouterr().err
    assert "no archived events for 2015-03-10T05 .. 2015-03-10T06" in err
    assert "the archive holds 2015-02-26T" in err


def test_an_unknown_view_is_an_error(env, capsys):
    assert main(["batch", "correct", "--hour", "2015-02-26T21", "--views", "nope"]) == 1
    assert "unknown view(s) nope" in capsys.readouterr().err


def test_an_empty_range_is_an_error(env, capsys):
    assert main(["batch", "correct", "--hour", "2015-02-26T22", "--to", "2015-02-26T21"]) == 1
    assert "is not after" in capsys.readouterr().err


@pytest.mark.spark
def test_correct_publishes_and_prints_a_table(spark, env, capsys):
    hour = env.event_hours()[0]
    code = main(
        [
            "batch",
            "correct",
            "--hour",
            hour_label(hour),
            "--views",
            "traffic_by_org,sessions_by_org",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "traffic_by_org" in out and "sessions_by_org" in out and "v1" in out
    assert "2 segment(s) published, 0 skipped" in out
    tables = ViewTables(TablesConfig.from_settings(get_settings(), env.store.root))
    for name in ("traffic_by_org", "sessions_by_org"):  # one snapshot each, in its table
        assert not env.store.exists(published_key(name, hour))
        (snapshot,) = tables.find(name).snapshots()
        summary = snapshot.summary
        assert summary["sluice.batch-version"] == "1" and summary["sluice.source"] == "batch"
        assert summary["sluice.archive-hours"] == hour_label(hour)
        assert summary["sluice.run-id"].startswith("cli-")
    tables.close()
    # The CLI reused the test session and left it running.
    assert spark.sparkContext._jsc is not None
    assert spark.range(1).count() == 1
