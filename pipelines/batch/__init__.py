"""The Spark batch correction: exact views from the raw archive, published as new versions.

The names that need pyspark (the correction itself) are imported when first used, so reading
the Spark settings (``pipelines.batch.config``) does not load Spark's Python side: Dagster's
run workers launch the correction through Pipes and never import pyspark.

May import: the rest of ``pipelines`` (views, kinds, aggregators, archive, segments, serving,
storage).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pipelines.batch.config import SparkSettings
from pipelines.batch.exceptions import ArchiveMissing, BatchError, InvalidHour, UnknownView

if TYPE_CHECKING:
    from pipelines.batch.archive import archive_hours
    from pipelines.batch.correct import correct_hours
    from pipelines.batch.publish import CorrectionResult
    from pipelines.batch.sessions import correct_session_hours, session_batch_schema
    from pipelines.batch.spark import build_spark, spark_conf, spark_uri
    from pipelines.batch.windows import batch_schema, segment_hours

__all__ = [
    "ArchiveMissing",
    "BatchError",
    "CorrectionResult",
    "InvalidHour",
    "SparkSettings",
    "UnknownView",
    "archive_hours",
    "batch_schema",
    "build_spark",
    "correct_hours",
    "correct_session_hours",
    "segment_hours",
    "session_batch_schema",
    "spark_conf",
    "spark_uri",
]

_LAZY = {
    "CorrectionResult": "pipelines.batch.publish",
    "archive_hours": "pipelines.batch.archive",
    "batch_schema": "pipelines.batch.windows",
    "correct_hours": "pipelines.batch.correct",
    "segment_hours": "pipelines.batch.windows",
    "correct_session_hours": "pipelines.batch.sessions",
    "session_batch_schema": "pipelines.batch.sessions",
    "build_spark": "pipelines.batch.spark",
    "spark_conf": "pipelines.batch.spark",
    "spark_uri": "pipelines.batch.spark",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
