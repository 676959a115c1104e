"""The Dagster deployment's options: which resource set, which hours, when schedules fire.

Read once, where the code location is built (:func:`get_dagster_settings`), like every other
settings model (:mod:`pipelines.settings`: environment, then the settings file, then these
defaults); a bad value stops the code location with one line naming the variable.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from pipelines.settings import SluiceBaseSettings, load_settings

__all__ = [
    "PARTITION_FORMAT",
    "DagsterSettings",
    "EmrServerlessSettings",
    "SpotSettings",
    "get_dagster_settings",
]

PARTITION_FORMAT = "%Y-%m-%d-%H:%M"


class DagsterSettings(SluiceBaseSettings):
    """How the Dagster code location is set up on this deployment."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_", extra="ignore")

    env: Literal["local", "prod"] = Field(
        default="local",
        description="Resource set: local (embedded broker, local storage, SQLite, local Spark) "
        "or prod (Kafka/MSK, S3, PostgreSQL, a Spark cluster, AWS Auto Scaling).",
    )
    partitions_start: str | None = Field(
        default=None,
        description="First hourly partition, UTC, YYYY-MM-DD-HH:MM; unset = the day of the "
        "first hour the raw archive holds (else 2014-04-10, the earliest shipped trace). "
        "sluice up sets it to the replay's first day.",
    )
    partitions_end: str | None = Field(
        default=None,
        description="End of the hourly partitions (exclusive), UTC, YYYY-MM-DD-HH:MM; unset = "
        "the current hour. sluice up sets it to the replay's end.",
    )
    correction_grace_minutes: int = Field(
        default=15,
        ge=0,
        le=24 * 60,
        description="Minutes past an hour's end, beyond the views' allowed lateness, before "
        "it is complete and corrected (event time; wall time for the hourly schedule).",
    )
    correction_retry_delay_s: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="Seconds before a failed correction launch is retried (twice, the second "
        "after twice as long): time for a restarted Spark Connect server to come back.",
    )
    idle_close_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds a caught-up fleet's watermark must stand still before the "
        "archive_hours_complete sensor closes the last hours too (the end of a replay).",
    )
    automation_interval_s: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="Seconds between ticks of the archive_hours_complete sensor and of the "
        "automation that corrects closed hours and reports corrected days.",
    )
    realtime_lag_sla_s: float = Field(
        default=600.0,
        gt=0,
        description="Time lag (s) a realtime view may have before its lag_within_sla check "
        "warns; the realtime_lag sensor evaluates it on every tick.",
    )
    correction_fresh_minutes: int = Field(
        default=120,
        ge=15,
        description="Minutes without a new correction after which a corrected view is overdue "
        "(freshness policy; warning at three quarters). An hour closes about once an hour.",
    )
    realtime_fresh_minutes: int = Field(
        default=10,
        ge=1,
        description="Minutes without a sign that a realtime view is current (its tasks "
        "reporting within the lag SLA; the realtime_lag sensor records one every quarter of "
        "this) after which realtime_<view> is overdue (freshness policy; warning at three "
        "quarters).",
    )
    report_fresh_hours: int = Field(
        default=26,
        ge=2,
        description="Hours without a new reconciliation report after which it is overdue "
        "(freshness policy; warning an hour before).",
    )
    alert_webhook_url: SecretStr | None = Field(
        default=None,
        description="Webhook that alerts are posted to as Slack-compatible JSON (a failed "
        "run, a failed ERROR check, a realtime task STALL/STOP/ERR), once per incident; "
        "unset = no alerts. A secret: sluice config masks it.",
    )
    dagster_url: str | None = Field(
        default=None,
        description="Base URL of the Dagster UI for the links in alerts (sluice up and "
        "start_dagster set it; default http://127.0.0.1:3000).",
    )
    report_cron: str = Field(
        default="30 0 * * *",
        description="Cron (UTC) of the daily reconciliation report of the previous day.",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _env_lower(cls, value: object) -> object:
        return value.strip().lower() or "local" if isinstance(value, str) else value

    @field_validator("partitions_start", "partitions_end")
    @classmethod
    def _partition_format(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            datetime.strptime(value, PARTITION_FORMAT)
        except ValueError:
            raise ValueError("expected YYYY-MM-DD-HH:MM, e.g. 2014-07-01-00:00") from None
        return value

    @field_validator("report_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        value = value.strip()
        if not _is_cron(value):
            raise ValueError("not a cron expression (e.g. 30 0 * * *)")
        return value


_CRON_FIELDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_NAMES = {
    3: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    4: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}


def _is_cron(value: str) -> bool:
    """Five standard cron fields (numbers, ranges, lists, steps, month and day names)."""
    fields = value.split()
    if len(fields) != 5:
        return False
    for i, (field, (low, high)) in enumerate(zip(fields, _CRON_FIELDS, strict=True)):
        names = _CRON_NAMES.get(i, [])
        for part in field.lower().split(","):
            base, _, step = part.partition("/")
            if step and not (step.isdigit() and int(step) > 0):
                return False
            if base == "*":
                continue
            for bound in base.split("-", 1):
                if bound in names:
                    continue
                if not bound.isdigit() or not low <= int(bound) <= high:
                    return False
    return True


class SpotSettings(SluiceBaseSettings):
    """The spot-interruption sensor: the SQS queue EventBridge and lifecycle hooks feed."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_SPOT_", extra="ignore")

    queue_url: str | None = Field(
        default=None,
        description="SQS queue of interruption, rebalance, state-change and lifecycle-hook "
        "notices (docs/spot.md wires it); unset = the sensor skips.",
    )
    dead_letter_queue_url: str | None = Field(
        default=None,
        description="Where messages that are not notices go, with the reason; unset = they "
        "stay on the queue for its redrive policy.",
    )
    region: str = Field(default="us-east-1", description="AWS region of the queue.")
    endpoint_url: str | None = Field(
        default=None, description="Endpoint override (e.g. a moto server); default: AWS."
    )
    max_messages: int = Field(
        default=10, ge=1, le=10, description="Messages read per sensor tick (SQS allows 10)."
    )
    evacuation_wait_s: float = Field(
        default=100.0,
        gt=0,
        description="How long an evacuation run waits for the tasks to run elsewhere (AWS "
        "gives two minutes).",
    )


class EmrServerlessSettings(SluiceBaseSettings):
    """Where production corrections run: an EMR Serverless Spark application (SLUICE_ENV=prod).

    The job file (``orchestration/control_plane/spark/correction_job.py``) is uploaded to
    ``entry_point`` with each release, and the application's image has Sluice installed
    (docs/batch.md)."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_EMR_", extra="ignore")

    application_id: str | None = Field(
        default=None, description="EMR Serverless application (type Spark) the job runs on."
    )
    execution_role_arn: str | None = Field(
        default=None,
        description="IAM role the job run assumes (reads the archive, writes "
        "segments and the Pipes messages).",
    )
    entry_point: str | None = Field(
        default=None,
        description="s3:// URI of the deployed orchestration/control_plane/spark/correction_job.py.",
    )
    messages_bucket: str | None = Field(
        default=None, description="Bucket the job writes its Dagster Pipes messages to."
    )
    warm_application_id: str | None = Field(
        default=None,
        description="EMR Serverless application with pre-initialized capacity "
        "(initialCapacity) that corrections of up to warm_max_hours run on, with no wait for "
        "workers; unset = every run on application_id (docs/batch.md: cost, when to use).",
    )
    warm_max_hours: int = Field(
        default=24,
        ge=1,
        description="Corrections of more hours than this (large backfills) run on "
        "application_id (on-demand capacity) instead of the warm application.",
    )
    warm_start_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="How long a run waits for a stopped warm application to start (its "
        "pre-initialized workers) before it runs on application_id instead.",
    )
    spark_submit_parameters: str = Field(
        default="", description="Extra spark-submit parameters, e.g. --conf spark.executor.cores=4."
    )
    region: str | None = Field(default=None, description="AWS region; unset = boto3's default.")
    endpoint_url: str | None = Field(
        default=None, description="Endpoint override for EMR Serverless and S3 (moto in tests)."
    )
    s3_scheme: str = Field(default="s3", description="s3 (EMRFS) or s3a for s3:// roots.")
    poll_interval_s: float = Field(
        default=5.0, gt=0, description="Seconds between polls of a running job run."
    )


@lru_cache(maxsize=1)
def get_dagster_settings() -> DagsterSettings:
    """The deployment's settings, read once per process."""
    return load_settings(DagsterSettings)
