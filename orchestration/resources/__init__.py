"""Resources per environment: identical keys for "local" and "prod", one env var picks the set.

``SLUICE_ENV`` (default ``local``) selects the set. Assets annotate the abstract resource of
each system (:class:`KafkaResource`, :class:`SparkResource`, :class:`StorageResource`,
:class:`ControlStoreResource`), never a concrete client. Secrets are ``dg.EnvVar`` values,
read by Dagster when a run starts, never at import time.

May import: the control-plane library (``orchestration.control_plane.autoscaling``, ``.settings``)
and ``pipelines``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dagster as dg

from orchestration.control_plane.settings import DagsterSettings
from orchestration.resources.control import (
    ControlStoreResource,
    LocalControlStoreResource,
    SqlControlStoreResource,
)
from orchestration.resources.fleet import AwsFleetResource, FleetResource, LocalFleetResource
from orchestration.resources.kafka import (
    ClusterKafkaResource,
    EmbeddedKafkaResource,
    KafkaResource,
)
from orchestration.resources.spark import (
    EmrServerlessSparkResource,
    LocalSparkResource,
    SparkResource,
)
from orchestration.resources.storage import LocalStorageResource, StorageResource
from pipelines.config import get_settings
from pipelines.settings import load_settings

__all__ = [
    "ENVS",
    "RESOURCE_SETS",
    "ControlStoreResource",
    "FleetResource",
    "KafkaResource",
    "SparkResource",
    "StorageResource",
    "get_env",
    "get_resources",
    "local_resources",
]


ENVS = ("local", "prod")


def local_resources() -> dict[str, Any]:
    """The local set, its fields filled from the ``SLUICE_*`` settings when the code location
    loads, so Dagster's resources page shows the storage root, control store and Spark a run
    will use. A control store URL that is not SQLite (it may carry a password) stays unset
    here and is read when a run opens the store."""
    settings = get_settings()
    url = settings.resolved_control_store_url
    sqlite_url = url if url.startswith("sqlite") else None
    return {
        "kafka": EmbeddedKafkaResource(),
        "spark": LocalSparkResource.from_settings(),
        "storage": LocalStorageResource(root=settings.resolved_storage_root),
        "control_store": LocalControlStoreResource(sqlite_url=sqlite_url),
        "fleet": LocalFleetResource(topic=settings.topic, control_store_url=sqlite_url),
    }


def _local_set() -> dict[str, Any]:
    return {
        "kafka": EmbeddedKafkaResource(),
        "spark": LocalSparkResource(),
        "storage": LocalStorageResource(),
        "control_store": LocalControlStoreResource(),
        "fleet": LocalFleetResource(),
    }


def _prod_set() -> dict[str, Any]:
    # dagster-aws is imported here, not at module level: the local set never needs it.
    from dagster_aws.s3 import S3Resource

    from orchestration.resources.s3_storage import S3StorageResource

    return {
        "kafka": ClusterKafkaResource(
            bootstrap_servers=dg.EnvVar("KAFKA_BOOTSTRAP_SERVERS"),
            sasl_username=dg.EnvVar("SLUICE_KAFKA_SASL_USERNAME"),
            sasl_password=dg.EnvVar("SLUICE_KAFKA_SASL_PASSWORD"),
        ),
        "spark": EmrServerlessSparkResource(),
        "storage": S3StorageResource(
            root=dg.EnvVar("SLUICE_STORAGE_ROOT"),
            s3=S3Resource(region_name=dg.EnvVar("AWS_REGION")),
        ),
        "control_store": SqlControlStoreResource(
            database_url=dg.EnvVar("SLUICE_CONTROL_STORE_URL")
        ),
        "fleet": AwsFleetResource(),
    }


RESOURCE_SETS: dict[str, Callable[[], dict[str, Any]]] = {"local": _local_set, "prod": _prod_set}
"""Each environment's resource set, built on demand (local with every field unset: read from
settings at use); a test compares their keys."""


def get_env() -> str:
    """The environment whose resources Dagster uses: ``SLUICE_ENV``, default ``local``."""
    return load_settings(DagsterSettings).env


def get_resources(env: str | None = None) -> dict[str, Any]:
    """The resource set of ``env`` (default: :func:`get_env`); local's shows its settings."""
    env = env or get_env()
    if env == "local":
        return local_resources()
    return {
        **RESOURCE_SETS[env](),
        "spark": EmrServerlessSparkResource.from_settings(),
        "fleet": AwsFleetResource.from_settings(),
    }
