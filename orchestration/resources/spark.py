"""Spark as a Dagster resource: where the correction job runs, launched through Dagster Pipes.

The run worker does not start Spark. It launches
``orchestration/control_plane/spark/correction_job.py`` and reads what the job reports: locally with
``spark-submit`` (:class:`LocalSparkResource`, Pipes' subprocess client), in production as an EMR
Serverless job run (:class:`EmrServerlessSparkResource`, dagster-aws' Pipes client, messages through
S3). The same file runs in both places; a backfill of many hours is one run and one launch
(``BackfillPolicy.single_run``), so Spark starts once for all of them.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from orchestration.control_plane.settings import EmrServerlessSettings
from orchestration.control_plane.spark.correction_job import CorrectionRequest
from orchestration.control_plane.spark.server import (
    ServerHealth,
    SparkConnectServer,
    spark_submit_path,
)
from pipelines.settings import load_settings, overridden

if TYPE_CHECKING:
    from pipelines.batch.config import SparkSettings

__all__ = [
    "EmrServerlessSparkResource",
    "LocalSparkResource",
    "SparkCheck",
    "SparkResource",
    "job_file",
]


def _capacity(app: dict) -> str:
    """An application's pre-initialized workers, e.g. ``Driver 1 x 2 vCPU/4 GB``."""
    parts = []
    for kind, config in sorted((app.get("initialCapacity") or {}).items()):
        worker = config.get("workerConfiguration", {})
        parts.append(
            f"{kind} {config.get('workerCount')} x {worker.get('cpu')}/{worker.get('memory')}"
        )
    return ", ".join(parts) or "no pre-initialized capacity"


def job_file() -> Path:
    """The correction job's file, as ``spark-submit`` and EMR are given it."""
    spec = importlib.util.find_spec("orchestration.control_plane.spark.correction_job")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


@dataclass(frozen=True)
class SparkCheck:
    """The outcome of :meth:`SparkResource.check`: passed, why, and figures to show."""

    passed: bool
    description: str
    metadata: dict[str, Any]


class SparkResource(dg.ConfigurableResource):
    """Runs the correction job for a request and hands back what it reported."""

    @abstractmethod
    def run_correction(
        self, context: dg.AssetExecutionContext, request: CorrectionRequest
    ) -> dg.PipesClientCompletedInvocation:
        """Launch the job through a Pipes client and wait for it."""

    def check(self) -> SparkCheck:
        """Whether corrections will find a warm Spark, and what it holds (the check job)."""
        return SparkCheck(True, "nothing warm to check: every run starts its own Spark", {})


class LocalSparkResource(SparkResource):
    """``spark-submit`` on this machine. Unset fields fall back to ``SLUICE_SPARK_*``; the code
    location fills them from those settings so the resources page shows what runs use."""

    master: str | None = Field(default=None, description="Spark master, e.g. local[2].")
    driver_memory: str | None = Field(default=None, description="Driver JVM heap, e.g. 2g.")
    shuffle_partitions: int | None = Field(
        default=None, description="spark.sql.shuffle.partitions (unset: Spark's default)."
    )
    s3_read_scheme: str | None = Field(
        default=None, description="s3a (hadoop-aws) or s3 (EMRFS) for s3:// storage roots."
    )
    spark_submit: str | None = Field(
        default=None, description="The spark-submit to run; default: the one beside Python."
    )
    connect: bool | None = Field(
        default=None,
        description="Correct through the warm Spark Connect server of the state directory "
        "when it runs (`sluice up`, `sluice spark start`), else spark-submit.",
    )

    @classmethod
    def from_settings(cls) -> LocalSparkResource:
        from pipelines.batch.config import SparkSettings

        spark = SparkSettings()
        return cls(
            master=spark.master,
            driver_memory=spark.driver_memory,
            shuffle_partitions=spark.shuffle_partitions,
            s3_read_scheme=spark.s3_scheme,
            connect=spark.connect,
        )

    def _spark_settings(self) -> SparkSettings:
        from pipelines.batch.config import SparkSettings

        return overridden(
            SparkSettings(),
            master=self.master,
            driver_memory=self.driver_memory,
            shuffle_partitions=self.shuffle_partitions,
            s3_scheme=self.s3_read_scheme,
        )

    def _spark_submit(self) -> str:
        if self.spark_submit:
            return self.spark_submit
        try:
            return spark_submit_path()
        except FileNotFoundError as exc:
            raise dg.Failure(f"{exc}, or set spark_submit") from None

    def server(self) -> SparkConnectServer:
        """The warm Spark Connect server of this deployment's state directory."""
        from pipelines.config import get_settings

        return SparkConnectServer(get_settings().resolved_state_dir)

    def server_health(self) -> ServerHealth | None:
        """The warm server's health, or None when corrections are not to use one."""
        connect = self.connect if self.connect is not None else self._spark_settings().connect
        return self.server().health() if connect else None

    def command(self) -> list[str]:
        """The ``spark-submit`` command line that runs the correction job.

        Every entry of the session Sluice would build itself (:func:`spark_conf`: the local
        defaults and ``SLUICE_SPARK_CONF``) goes on the command line, so the job under
        spark-submit runs with the same configuration as ``sluice batch correct``.
        """
        from pipelines.batch.spark import spark_conf

        settings = self._spark_settings()
        conf = spark_conf(settings)
        command = [self._spark_submit(), "--master", conf.pop("spark.master")]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, str(job_file())]

    def check(self) -> SparkCheck:
        health = self.server_health()
        if health is None:
            return SparkCheck(True, "the warm server is off (SLUICE_SPARK_CONNECT=false)", {})
        figures = {
            "url": health.url or "",
            "pid": health.pid or 0,
            "keeper_pid": health.keeper_pid or 0,
            "rss_mb": round(health.rss_mb or 0.0, 1),
            "uptime_s": round(health.uptime_s or 0.0, 1),
            "restarts": health.restarts,
        }
        if not health.running:
            return SparkCheck(
                False, f"{health.line()}; corrections fall back to spark-submit", figures
            )
        return SparkCheck(True, health.line(), figures)

    def run_correction(
        self, context: dg.AssetExecutionContext, request: CorrectionRequest
    ) -> dg.PipesClientCompletedInvocation:
        """Through the warm Spark Connect server when it answers (the job is then a plain
        Python process), else with spark-submit, saying why in the run's log."""
        settings = self._spark_settings()
        env = {
            "PYSPARK_PYTHON": settings.python or sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SLUICE_SPARK_S3_SCHEME": settings.s3_scheme,
        }
        client = dg.PipesSubprocessClient(forward_termination=True)
        health = self.server_health()
        if health is None or not health.running:
            why = "off (SLUICE_SPARK_CONNECT=false)" if health is None else health.reason
            context.log.warning(
                f"Spark Connect server not used: {why}. Starting Spark with spark-submit "
                "(a new JVM, slow to start); `sluice spark start` keeps one warm."
            )
            return client.run(
                context=context, command=self.command(), extras=request.extras(), env=env
            )
        shared = f", shared session {health.session_id[:8]}" if health.session_id else ""
        context.log.info(
            f"correcting through the warm Spark Connect server {health.url} (pid {health.pid}, "
            f"{health.rss_mb or 0:.0f} MB RSS, {health.restarts} restart(s){shared})"
        )
        env["SLUICE_SPARK_REMOTE"] = str(health.session_url)
        try:
            return client.run(
                context=context,
                command=[sys.executable, str(job_file())],
                extras=request.extras(),
                env=env,
            )
        except Exception as exc:
            after = self.server().health()
            if after.pid != health.pid or not after.running:
                # Not allow_retries=False: the retry policy runs the correction again once
                # the keeper has the server back (or with spark-submit if it is not).
                raise dg.Failure(
                    f"the Spark Connect server {health.url} (pid {health.pid}) stopped during "
                    f"the correction (now: {after.reason}, pid {after.pid}); nothing of the "
                    "unfinished views was published, and the retry policy runs it again"
                ) from exc
            raise


class EmrServerlessSparkResource(SparkResource):
    """An EMR Serverless job run per launch; the job's messages come back through S3. Unset fields
    come from ``SLUICE_EMR_*``
    (:class:`~orchestration.control_plane.settings.EmrServerlessSettings`)."""

    application_id: str | None = Field(default=None, description="EMR Serverless application.")
    execution_role_arn: str | None = Field(default=None, description="IAM role of the job run.")
    entry_point: str | None = Field(
        default=None,
        description="s3:// URI of the deployed orchestration/control_plane/spark/correction_job.py.",
    )
    messages_bucket: str | None = Field(
        default=None, description="Bucket the job writes its Pipes messages to."
    )
    region: str | None = Field(default=None, description="AWS region; unset = boto3's default.")
    warm_application_id: str | None = Field(
        default=None,
        description="Application with pre-initialized capacity for corrections of up to "
        "SLUICE_EMR_WARM_MAX_HOURS hours (no wait for workers).",
    )

    @classmethod
    def from_settings(cls) -> EmrServerlessSparkResource:
        emr = load_settings(EmrServerlessSettings)
        return cls(
            warm_application_id=emr.warm_application_id,
            application_id=emr.application_id,
            execution_role_arn=emr.execution_role_arn,
            entry_point=emr.entry_point,
            messages_bucket=emr.messages_bucket,
            region=emr.region,
        )

    def settings(self) -> EmrServerlessSettings:
        """The settings with this resource's fields over them; a clear error if one is missing."""
        emr = overridden(
            load_settings(EmrServerlessSettings),
            application_id=self.application_id,
            execution_role_arn=self.execution_role_arn,
            entry_point=self.entry_point,
            messages_bucket=self.messages_bucket,
            region=self.region,
            warm_application_id=self.warm_application_id,
        )
        required = ("application_id", "execution_role_arn", "entry_point", "messages_bucket")
        missing = [k for k in required if getattr(emr, k) is None]
        if missing:
            names = ", ".join(f"SLUICE_EMR_{k.upper()}" for k in missing)
            raise dg.Failure(f"EMR Serverless is not configured: set {names} (docs/batch.md)")
        return emr

    def _client(self, emr: EmrServerlessSettings):
        import boto3

        session = boto3.session.Session(region_name=emr.region)
        return session.client("emr-serverless", endpoint_url=emr.endpoint_url)

    def application_for(self, hours: int, log: Any = None) -> str:
        """The application a correction of ``hours`` hours runs on: the warm one (pre-initialized
        capacity, started here if it is not) unless the run is larger than
        ``warm_max_hours`` or the warm application cannot start in time."""
        emr = self.settings()
        warm = emr.warm_application_id
        if warm is None or hours > emr.warm_max_hours:
            if warm is not None and log is not None:
                log.info(
                    f"{hours} hours > SLUICE_EMR_WARM_MAX_HOURS={emr.warm_max_hours}: on "
                    f"{emr.application_id} (on-demand capacity), not the warm application"
                )
            return str(emr.application_id)
        client = self._client(emr)
        app = client.get_application(applicationId=warm)["application"]
        if not app.get("initialCapacity") and log is not None:
            log.warning(f"warm application {warm} has no initialCapacity: runs wait for workers")
        deadline = time.monotonic() + emr.warm_start_timeout_s
        while app["state"] != "STARTED":
            if app["state"] in ("CREATED", "STOPPED"):
                if log is not None:
                    log.info(f"starting warm application {warm} ({app['state']})")
                client.start_application(applicationId=warm)
            elif app["state"] == "TERMINATED" or time.monotonic() > deadline:
                if log is not None:
                    log.warning(
                        f"warm application {warm} is {app['state']}: on {emr.application_id}"
                    )
                return str(emr.application_id)
            time.sleep(min(emr.poll_interval_s, 5.0))
            app = client.get_application(applicationId=warm)["application"]
        if log is not None:
            log.info(f"on warm application {warm}: {_capacity(app)}")
        return warm

    def check(self) -> SparkCheck:
        """The warm application's state and pre-initialized capacity (started = warm)."""
        emr = self.settings()
        if emr.warm_application_id is None:
            return SparkCheck(True, "no warm application (SLUICE_EMR_WARM_APPLICATION_ID)", {})
        app = self._client(emr).get_application(applicationId=emr.warm_application_id)
        app = app["application"]
        figures = {"application": emr.warm_application_id, "state": app["state"]}
        figures["capacity"] = _capacity(app)
        text = f"warm application {emr.warm_application_id} is {app['state']}: {_capacity(app)}"
        return SparkCheck(
            app["state"] == "STARTED" and bool(app.get("initialCapacity")), text, figures
        )

    def start_job_run_params(
        self, context: dg.AssetExecutionContext, application_id: str | None = None
    ) -> dict:
        """EMR Serverless' ``start_job_run`` request, before Pipes adds its bootstrap values."""
        emr = self.settings()
        submit = f"{emr.spark_submit_parameters} --conf spark.emr-serverless.driverEnv."
        submit += f"SLUICE_SPARK_S3_SCHEME={emr.s3_scheme}"
        return {
            "applicationId": application_id or emr.application_id,
            "executionRoleArn": emr.execution_role_arn,
            "name": f"sluice-correction-{context.run_id[:8]}",
            "clientToken": f"{context.run_id}-{context.retry_number}",
            "jobDriver": {
                "sparkSubmit": {"entryPoint": emr.entry_point, "sparkSubmitParameters": submit}
            },
        }

    def run_correction(
        self, context: dg.AssetExecutionContext, request: CorrectionRequest
    ) -> dg.PipesClientCompletedInvocation:
        import boto3
        from dagster_aws.pipes import PipesEMRServerlessClient, PipesS3MessageReader

        class _MessagesThroughS3(PipesEMRServerlessClient):
            def _read_messages(self, *args: object, **kwargs: object) -> None:
                """The job's messages arrive through S3 while it runs; dagster-aws would read
                CloudWatch afterwards (and only warn that it cannot)."""

        emr = self.settings()
        session = boto3.session.Session(region_name=emr.region)
        client = _MessagesThroughS3(
            client=session.client("emr-serverless", endpoint_url=emr.endpoint_url),
            message_reader=PipesS3MessageReader(
                bucket=str(emr.messages_bucket),
                client=session.client("s3", endpoint_url=emr.endpoint_url),
                interval=2,
            ),
            poll_interval=emr.poll_interval_s,
        )
        return client.run(
            context=context,
            start_job_run_params=self.start_job_run_params(  # type: ignore[arg-type]
                context, self.application_for(len(request.hours), context.log)
            ),
            extras=request.extras(),
        )
