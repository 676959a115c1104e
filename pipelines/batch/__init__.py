"""The Spark batch correction: exact views from the raw archive, published as new versions.

May import: the rest of ``pipelines`` (views, aggregators, archive, segments, serving, storage).
"""

from pipelines.batch.config import SparkSettings
from pipelines.batch.correct import (
    CorrectionResult,
    archive_hours,
    batch_schema,
    correct_hours,
    segment_hours,
)
from pipelines.batch.exceptions import ArchiveMissing, BatchError, InvalidHour, UnknownView
from pipelines.batch.spark import build_spark, spark_conf, spark_uri

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
    "segment_hours",
    "spark_conf",
    "spark_uri",
]
