"""The corrected assets launch the Spark job through Dagster Pipes: with a real ``spark-submit``
on this machine, and as an EMR Serverless job run (moto's server stands in for the EMR API and
S3; the test plays EMR and runs the submitted job with the parameters moto received)."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import dagster as dg
import pytest
from dagster_pipes import PipesMappingParamsLoader

from assets.constants import corrected_key
from assets.partitions import partition_key_for
from orchestration.control_plane.spark.correction_job import (
    SEGMENT_RULES_CHECK,
    CorrectionRequest,
    main,
)
from orchestration.definitions import corrected_assets
from orchestration.resources import LocalStorageResource
from orchestration.resources.spark import (
    EmrServerlessSparkResource,
    LocalSparkResource,
    job_file,
)
from pipelines.batch import SparkSettings, spark_conf
from pipelines.config import get_settings
from pipelines.segments import HOUR_MS
from tests.fixtures.dagster_fixture import build_archive, example_views
from tests.fixtures.moto import aws_test_credentials, moto_endpoint  # noqa: F401
from tests.fixtures.processes import wait_until
from tests.fixtures.spark import spark  # noqa: F401  (session-scoped SparkSession)

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

VIEW = next(v for v in example_views() if v.name == "traffic_by_org")


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    root = tmp_path_factory.mktemp("launch") / "storage"
    return root, build_archive(root).event_hours()


def _one_hour(hour: int) -> dict[str, str]:
    key = partition_key_for(hour)
    return {"dagster/asset_partition_range_start": key, "dagster/asset_partition_range_end": key}


def test_the_spark_submit_command_carries_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch itself runs in the Dagster e2e (real run workers, real spark-submit, the
    reported metadata checked against the store); here, what it is given."""
    monkeypatch.setenv("SLUICE_SPARK_CONF", '{"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}')
    submit = LocalSparkResource(master="local[1]", driver_memory="768m", shuffle_partitions=2)
    command = submit.command()
    assert Path(command[0]).name == "spark-submit" and Path(command[0]).exists()
    assert command[-1] == str(job_file())
    pairs = dict(zip(command[1:-1:2], command[2:-1:2], strict=True))
    assert pairs["--master"] == "local[1]"
    confs = [c for flag, c in itertools.pairwise(command) if flag == "--conf"]
    assert "spark.driver.memory=768m" in confs
    assert "spark.sql.shuffle.partitions=2" in confs
    assert "spark.driver.host=127.0.0.1" in confs
    assert "spark.driver.extraJavaOptions=-XX:+UseSerialGC" in confs
    # The same session as `sluice batch correct` builds: its local defaults come along.
    settings = SparkSettings(master="local[1]", driver_memory="768m", shuffle_partitions=2)
    assert set(confs) == {f"{k}={v}" for k, v in spark_conf(settings).items()} - {
        "spark.master=local[1]"
    }


def test_the_code_location_does_not_import_pyspark() -> None:
    """What a run worker loads: definitions and resources, without Spark's Python side."""
    probe = (
        "import sys, orchestration.definitions, orchestration.resources.spark;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_job_started_by_hand_says_what_to_run_instead() -> None:
    done = subprocess.run(
        [sys.executable, str(job_file())], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "sluice batch correct" in done.stderr


DRIVER_ENV = re.compile(r"--conf spark\.emr-serverless\.driverEnv\.(\w+)=(\S+)")


def _play_emr(endpoint: str, application_id: str, errors: list[BaseException]) -> None:
    """EMR's part: take the job run moto recorded and run its entry point with the driver
    environment it was submitted with (Pipes' bootstrap values among them)."""
    emr = boto3.client("emr-serverless", endpoint_url=endpoint, region_name="us-east-1")
    try:

        def submitted():
            try:
                runs = emr.list_job_runs(applicationId=application_id)["jobRuns"]
            except emr.exceptions.ResourceNotFoundException:  # moto's answer before the first
                return None
            return runs[0]["id"] if runs else None

        run_id = wait_until(submitted, 60, "a job run on the application", every_s=0.1)
        run = emr.get_job_run(applicationId=application_id, jobRunId=run_id)["jobRun"]
        submit = run["jobDriver"]["sparkSubmit"]
        env = dict(DRIVER_ENV.findall(submit["sparkSubmitParameters"]))
        assert submit["entryPoint"] == "s3://sluice-code/correction_job.py"
        assert env["SLUICE_SPARK_S3_SCHEME"] == "s3"
        assert main(params_loader=PipesMappingParamsLoader(env)) == 0
    except BaseException as exc:
        errors.append(exc)


@pytest.mark.usefixtures("spark")
def test_a_correction_runs_as_an_emr_serverless_job_run(
    archive,
    moto_endpoint: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    root, hours = archive
    aws_test_credentials(monkeypatch)
    monkeypatch.setenv("SLUICE_EMR_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("SLUICE_EMR_POLL_INTERVAL_S", "0.2")
    monkeypatch.setenv("SLUICE_S3_ENDPOINT_URL", moto_endpoint)  # the job's Pipes messages
    get_settings.cache_clear()
    request.addfinalizer(get_settings.cache_clear)
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket="sluice-pipes")
    emr = boto3.client("emr-serverless", endpoint_url=moto_endpoint, region_name="us-east-1")
    application_id = emr.create_application(name="sluice", releaseLabel="emr-7.5.0", type="SPARK")[
        "applicationId"
    ]
    warm = emr.create_application(
        name="sluice-warm", releaseLabel="emr-7.5.0", type="SPARK", initialCapacity=CAPACITY
    )["applicationId"]
    emr.stop_application(applicationId=warm)  # its auto-stop ran: the launch starts it
    # an hour the archive does not hold: the job answers at once and says it skipped it
    empty = hours[0] - HOUR_MS
    errors: list[BaseException] = []
    # an hour's correction runs on the warm application, which the launch starts first
    player = threading.Thread(target=_play_emr, args=(moto_endpoint, warm, errors))
    player.start()
    resource = EmrServerlessSparkResource(
        application_id=application_id,
        execution_role_arn="arn:aws:iam::123456789012:role/sluice-correction",
        entry_point="s3://sluice-code/correction_job.py",
        messages_bucket="sluice-pipes",
        region="us-east-1",
        warm_application_id=warm,
    )
    assert not resource.check().passed  # not started: the first run would wait for workers
    result = dg.materialize(
        corrected_assets,
        selection=dg.AssetSelection.assets(corrected_key(VIEW.name)),
        resources={"storage": LocalStorageResource(root=str(root)), "spark": resource},
        tags=_one_hour(empty),
        raise_on_error=False,
    )
    player.join(timeout=60)
    assert errors == []
    assert result.success, result.all_events
    (event,) = result.get_asset_materialization_events()
    metadata = {k: v.value for k, v in event.materialization.metadata.items()}
    assert metadata["skipped"] is True and metadata["reason"]
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == SEGMENT_RULES_CHECK and check.passed
    with pytest.raises(emr.exceptions.ResourceNotFoundException):  # moto: no run there yet
        emr.list_job_runs(applicationId=application_id)
    assert len(emr.list_job_runs(applicationId=warm)["jobRuns"]) == 1
    warm_check = resource.check()
    assert warm_check.passed and warm_check.metadata["state"] == "STARTED"
    assert warm_check.metadata["capacity"] == "Driver 1 x 2 vCPU/4 GB, Executor 2 x 4 vCPU/8 GB"
    # a backfill larger than SLUICE_EMR_WARM_MAX_HOURS goes to the on-demand application
    monkeypatch.setenv("SLUICE_EMR_WARM_MAX_HOURS", "2")
    assert resource.application_for(3) == application_id
    assert resource.application_for(2) == warm


CAPACITY = {
    "Driver": {"workerCount": 1, "workerConfiguration": {"cpu": "2 vCPU", "memory": "4 GB"}},
    "Executor": {"workerCount": 2, "workerConfiguration": {"cpu": "4 vCPU", "memory": "8 GB"}},
}


def test_a_request_travels_whole_and_an_incomplete_one_is_named() -> None:
    request = CorrectionRequest([{"name": "v"}], [HOUR_MS], "/storage", {"v": "corrected_v"})
    assert CorrectionRequest.from_extras(request.extras()) == request
    with pytest.raises(ValueError, match=r"lacks \['asset_keys', 'storage_root'\]"):
        CorrectionRequest.from_extras({"definitions": [], "hours": []})


def test_emr_settings_come_from_the_resource_over_the_environment(monkeypatch) -> None:
    for name in ("APPLICATION_ID", "EXECUTION_ROLE_ARN", "ENTRY_POINT", "MESSAGES_BUCKET"):
        monkeypatch.delenv(f"SLUICE_EMR_{name}", raising=False)
    monkeypatch.setenv("SLUICE_EMR_APPLICATION_ID", "from-env")
    with pytest.raises(dg.Failure, match="set SLUICE_EMR_EXECUTION_ROLE_ARN, SLUICE_EMR_ENTRY"):
        EmrServerlessSparkResource().settings()
    resource = EmrServerlessSparkResource(
        execution_role_arn="arn:aws:iam::123456789012:role/r",
        entry_point="s3://code/correction_job.py",
        messages_bucket="pipes",
    )
    emr = resource.settings()
    assert (emr.application_id, emr.messages_bucket) == ("from-env", "pipes")


def test_without_the_warm_server_the_run_uses_spark_submit_and_says_why(
    archive, tmp_path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The fallback path, real: no Spark Connect server in the state directory, so the run
    starts Spark with spark-submit (a JVM of its own) and its log says why."""
    root, hours = archive
    monkeypatch.setenv("SLUICE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(
        "SLUICE_SPARK_CONF", '{"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}'
    )
    get_settings.cache_clear()
    request.addfinalizer(get_settings.cache_clear)
    local = LocalSparkResource(
        master="local[1]", driver_memory="768m", shuffle_partitions=2, connect=True
    )
    assert not local.check().passed and "no keeper" in local.check().description
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        corrected_assets,
        selection=dg.AssetSelection.assets(corrected_key(VIEW.name)),
        resources={"storage": LocalStorageResource(root=str(root)), "spark": local},
        tags=_one_hour(hours[0] - HOUR_MS),  # not archived: the job answers at once
        instance=instance,
        raise_on_error=False,
    )
    assert result.success, result.all_events
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    fallback = [m for m in messages if m.startswith("Spark Connect server not used")]
    assert fallback and "spark-submit" in fallback[0] and "no keeper" in fallback[0], messages
    assert any("Spark ready" in m and "(own JVM)" in m for m in messages), messages
    (event,) = result.get_asset_materialization_events()
    assert event.materialization.metadata["spark_session"].value == "own JVM"
