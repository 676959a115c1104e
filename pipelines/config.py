"""Every setting a user configures, in one place: environment variables with the embedded default.

Settings are pydantic models read from ``SLUICE_*`` variables (and ``KAFKA_BOOTSTRAP_SERVERS``,
the name Kafka tooling already uses) or the settings file (:mod:`pipelines.settings`). Unset, Sluice runs on one machine: the embedded broker,
a local storage root and a SQLite control store under the state directory.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from pipelines.settings import BucketFactor, SluiceBaseSettings, load_settings

__all__ = ["PROJECT_ROOT", "KafkaSettings", "SluiceSettings", "get_settings"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The checkout; shipped data (traces, example views) lives under ``data/``."""


class KafkaSettings(SluiceBaseSettings):
    """How to reach the Kafka-protocol cluster; unset bootstrap servers mean the embedded broker."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_KAFKA_", extra="ignore")

    bootstrap_servers: str | None = Field(
        default=None,
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "SLUICE_KAFKA_BOOTSTRAP_SERVERS"),
        description="host:port[,host:port]; unset = the embedded broker started by `sluice broker`.",
    )
    security_protocol: str = Field(
        default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (MSK)."
    )
    sasl_mechanism: str | None = Field(default=None, description="PLAIN, SCRAM-SHA-512, ...")
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(
        default=None, description="SASL password; never logged."
    )
    ssl_cafile: str | None = Field(default=None, description="CA bundle for SSL.")
    client: Literal["confluent", "kafka-python"] = Field(
        default="confluent",
        description="The client stream workers read and the generator writes with: "
        "confluent (librdkafka, several times faster) or kafka-python.",
    )
    timeout_s: float = Field(
        default=10.0,
        ge=1.0,
        description="The longest any one call to the broker waits: a new client's bootstrap, "
        "metadata, offsets, commits, a producer's flush. A supervisor, an agent, a sensor or the "
        "CLI that meets a broker gone logs it and tries again at its next pass.",
    )

    def client_kwargs(self, bootstrap_servers: str) -> dict[str, Any]:
        """The one converter from settings to kafka-python client keyword arguments."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers.split(","),
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            if self.sasl_password is not None:
                kwargs["sasl_plain_password"] = self.sasl_password.get_secret_value()
        if self.ssl_cafile:
            kwargs["ssl_cafile"] = self.ssl_cafile
        # without these kafka-python waits 30 s to bootstrap and per request
        kwargs["request_timeout_ms"] = self.timeout_ms
        kwargs["bootstrap_timeout_ms"] = self.timeout_ms
        return kwargs

    @property
    def timeout_ms(self) -> int:
        return max(1, int(self.timeout_s * 1000))


class SluiceSettings(SluiceBaseSettings):
    """Where Sluice keeps its state and how its stream workers behave."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_", extra="ignore")

    state_dir: Path = Field(
        default=Path(".sluice"),
        description="Broker state, PID files, Dagster home and the default storage root.",
    )
    storage_root: str | None = Field(
        default=None,
        description="Segments, checkpoints and the raw archive: a directory or s3://bucket/prefix. "
        "Default: <state_dir>/storage.",
    )
    s3_endpoint_url: str | None = Field(
        default=None, description="S3-compatible endpoint (tests, MinIO); unset = AWS."
    )
    control_store_timeout_s: float = Field(
        default=10.0,
        ge=1.0,
        description="The longest a control-store call waits: to connect, for a statement (a "
        "server-side statement timeout on PostgreSQL), for a pooled connection, for SQLite's "
        "lock. A server that hangs mid-query is not bounded by these: a stopping process "
        "gives up on it after SLUICE_STOP_TIMEOUT_S.",
    )
    storage_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="The longest an object-storage (S3) request waits to connect and for each "
        "read of its answer; a failed request is retried once.",
    )
    stop_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=60.0,
        description="How long a process told to stop (SIGTERM, SIGINT) may take to stop "
        "gracefully (final checkpoints, releasing its tasks and lease, stopping its children). "
        "Past it the process says what it gave up on and exits; the job model's loss detection "
        "moves tasks it could not release. A supervisor SIGKILLs agents still running then.",
    )
    control_store_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the control store (task metrics, job model), e.g. "
        "postgresql+psycopg://user:password@host/db for a fleet on several machines. "
        "Default: sqlite:///<state_dir>/control.db.",
    )
    views_file: Path = Field(
        default=PROJECT_ROOT / "data" / "views.yaml", description="The view definitions (YAML)."
    )
    topics_file: Path = Field(
        default=PROJECT_ROOT / "data" / "topics.yaml",
        description="Topic declarations (YAML, topics:): each topic's columns, event time and "
        'id, for the topics a views file does not declare itself; topic "*" declares the rest.',
    )
    schema_registry_url: str | None = Field(
        default=None,
        description="The schema registry (Confluent's REST API) through which topics declared "
        "encoding: avro resolve their messages' schema ids; a password in the URL is masked.",
    )
    schema_registry_user_info: SecretStr | None = Field(
        default=None,
        description="user:password for the schema registry's HTTP basic auth; never logged.",
    )
    schema_registry_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="The longest one schema registry request waits.",
    )
    topic: str = Field(default="events", description="Topic the generator writes to.")
    dead_letter_topic: str = Field(
        default="events.dlq", description="Where bad input goes, with its reason."
    )
    aggregator_modules: str = Field(
        default="",
        description="Python modules (comma-separated, importable where Sluice runs) imported "
        "at start-up by every process that loads views, so that the custom aggregations they "
        "register with pipelines.aggregators.register can be named in views.",
    )
    partitions: int = Field(default=4, ge=1, description="Partitions of a topic Sluice creates.")
    flush_interval_s: float = Field(
        default=30.0,
        ge=1.0,
        description="How often a task writes its realtime segments (and the archive since its "
        "last flush); with the publisher acting within SLUICE_PUBLISH_INTERVAL_S of a flush, "
        "realtime rows reach the views' tables within about this plus a pass.",
    )
    checkpoint_interval_s: float = Field(
        default=60.0, ge=1.0, description="How often a task checkpoints state and offsets."
    )
    status_interval_s: float = Field(
        default=2.0, gt=0, description="How often a worker reports task metrics."
    )
    max_message_bytes: int = Field(
        default=64 * 1024, ge=256, description="Larger messages are dead-lettered as oversize."
    )
    max_future_s: float = Field(
        default=6 * 3600.0,
        gt=0,
        description="An event this far ahead of its task's watermark is dead-lettered.",
    )
    poll_max_records: int = Field(
        default=20_000,
        ge=1,
        description="Records per poll; a poll's records of one partition are decoded and "
        "aggregated as one batch (librdkafka hands over a partition's fetch at a time, so a "
        "task's batch is often the whole poll), and the views' per-batch costs amortize over it.",
    )
    fleet_sample_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="How often the supervisor of a fleet (`sluice up`, `sluice stream`) records "
        "its workers, backlog, time lag and watermark for the reconciliation report.",
    )
    fleet_sample_retention_days: float = Field(
        default=14.0, gt=0, description="Fleet samples older than this are pruned."
    )
    worker_max_rate: float | None = Field(
        default=None,
        gt=0,
        description="Most messages per second one worker processes, e.g. to protect a "
        "downstream store; unset = unlimited. Throttled time counts as busy, so a worker at its "
        "cap reports utilisation ~1 and autoscalers see the cap as its capacity.",
    )

    agent_heartbeat_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often an agent renews its heartbeat and reads its assignment; the "
        "coordinator re-plans the job model at this pace too.",
    )
    agent_loss_after_s: float = Field(
        default=10.0,
        gt=0,
        description="An agent whose heartbeat is older than this is lost: its tasks go to "
        "Waiting and are scheduled on live agents (also the coordinator lease's length). Keep "
        "agents' clocks in sync (NTP) well within it.",
    )
    task_waiting_max_s: float = Field(
        default=60.0,
        gt=0,
        description="The watchdog: while a running agent exists, no task stays Waiting longer "
        "than this. The coordinator cancels a split or merge that blocks it (unless its storage "
        "rewrite may have run) and schedules the task as it is, saying why in the job history; "
        "`sluice status` and the realtime_lag sensor name every task waiting longer.",
    )
    spot_imds_url: str | None = Field(
        default=None,
        description="The EC2 instance metadata service an agent polls for spot interruption "
        "and rebalance notices, e.g. http://169.254.169.254 on EC2; unset = not polled.",
    )
    spot_poll_interval_s: float = Field(
        default=5.0, gt=0, description="How often an agent polls SLUICE_SPOT_IMDS_URL."
    )
    view_crash_limit: int = Field(
        default=3,
        ge=1,
        description="A view that crashes this many times on a task within "
        "SLUICE_VIEW_CRASH_WINDOW_S is disabled there (Mist's rule); the task's other views go on.",
    )
    view_crash_window_s: float = Field(
        default=600.0, gt=0, description="The window of SLUICE_VIEW_CRASH_LIMIT."
    )
    max_bucket_factor: BucketFactor = Field(
        default=1,
        description="Most key buckets (virtual tasks, a power of two) the coordinator splits a "
        "partition into so that more agents than partitions share the work; 1 = one task per "
        "partition. The coordinator picks the factor that gives the live agents the most "
        "capacity. Topics with a session view are not split.",
    )
    bucket_merge_delay_s: float = Field(
        default=60.0,
        ge=0,
        description="How long fewer agents must call for fewer key buckets before the "
        "coordinator merges them (a merge, like a split, moves every task's state).",
    )
    key_field: str = Field(
        default="org",
        description="The event field whose value is the Kafka record key (the generator's "
        "--key-field). A split gives a view grouped by it each child's own groups; other views' "
        "state stays with the first child. Results are exact either way.",
    )
    tables_catalog: Literal["sql", "glue"] = Field(
        default="sql",
        description="The Iceberg catalog of the views' tables (docs/serving.md): sql = pyiceberg's "
        "SQL catalog in SLUICE_TABLES_CATALOG_URL's database; glue = AWS Glue (for Athena).",
    )
    tables_catalog_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the SQL catalog. Default: the control store's "
        "(SLUICE_CONTROL_STORE_URL), so a fleet on PostgreSQL shares one catalog.",
    )
    tables_namespace: str = Field(
        default="sluice", description="Iceberg namespace (Glue database) of the views' tables."
    )
    tables_catalog_properties: str = Field(
        default="{}",
        description='Extra pyiceberg catalog properties as JSON, e.g. {"glue.region": "eu-west-1"}.',
    )
    publish_interval_s: float = Field(
        default=5.0,
        gt=0,
        description="How often the realtime publisher (run by the agent holding the coordinator "
        "lease) looks at the change log and commits the hours the tasks' flushes rewrote to the "
        "views' tables; a pass with nothing flushed since the last costs one listing per view.",
    )
    table_lag_alert_s: float = Field(
        default=300.0,
        gt=0,
        description="The realtime_lag sensor alerts when a view's table lag (how long the oldest "
        "change a task flushed has waited for the publisher) exceeds this; sluice status and "
        "the realtime asset's metadata show the lag.",
    )
    tables_snapshot_retention_h: float = Field(
        default=72.0,
        gt=0,
        description="Table snapshots older than this are expired (time travel reaches back this "
        "far); the tables_maintenance job then removes the files no snapshot references.",
    )
    tables_realtime_snapshot_retention_m: float = Field(
        default=60.0,
        gt=0,
        description="Realtime publishes older than this are expired by the publisher itself "
        "(every 10 minutes), except the last of each hour and those a correction replaced: a "
        "publish every 30 s would otherwise keep 2,880 snapshots a day, and every commit "
        "copies them all.",
    )
    tables_maintenance_cron: str = Field(
        default="17 * * * *",
        description="When the tables_maintenance Dagster job runs (cron, UTC); on by default.",
    )

    def schema_registry_conf(self) -> dict[str, Any] | None:
        """The one converter from settings to the schema registry client's configuration
        (None: no registry set)."""
        if not self.schema_registry_url:
            return None
        conf: dict[str, Any] = {
            "url": self.schema_registry_url,
            "timeout": self.schema_registry_timeout_s,
        }
        if self.schema_registry_user_info is not None:
            conf["basic.auth.user.info"] = self.schema_registry_user_info.get_secret_value()
        return conf

    @property
    def resolved_state_dir(self) -> Path:
        return self.state_dir.expanduser().resolve()

    @property
    def resolved_storage_root(self) -> str:
        return self.storage_root or str(self.resolved_state_dir / "storage")

    @property
    def resolved_control_store_url(self) -> str:
        return self.control_store_url or f"sqlite:///{self.resolved_state_dir / 'control.db'}"


@lru_cache(maxsize=1)
def get_settings() -> SluiceSettings:
    """Settings from the environment and the settings file, read once per process."""
    return load_settings(SluiceSettings)
