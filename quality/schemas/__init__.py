"""pandera schemas of the data at Sluice's boundaries, each defined once (see spec.py).

- the raw archive: a topic's events from its declaration, :func:`archive_events_spec` (its
  columns' value rules: :func:`column_rules`), and :data:`DEAD_LETTERS`;
- per view: realtime segments, corrected (batch) segments and query results,
  :func:`segment_spec`, :func:`corrected_schema`, and in Spark :func:`spark_schema`;
- per aggregation: the rules of its output columns, from its own description and its input's
  declaration, :func:`metric_rules` (the segment specs and the expectation suites both use them);
- each spec becomes a pandas schema (:func:`pandas_schema`) and a Spark one, never written
  twice;
- validators raising :class:`~quality.exceptions.SchemaViolation`:
  :func:`validate_archive_events`, :func:`validate_dead_letters`, :func:`validate_segment`
  and, for ``correct_hours(validate_segment=...)``, :func:`validate_spark_segment` (a Spark
  frame) or, for ``validate_rows=``, :func:`validate_batch_rows` (the collected Arrow rows).

May import: ``pipelines`` and ``quality.exceptions``.
"""

from quality.schemas.archive import (
    DEAD_LETTERS,
    archive_events_spec,
    column_rules,
    validate_archive_events,
    validate_dead_letters,
)
from quality.schemas.metrics import metric_rules, output_rules
from quality.schemas.pandas_backend import pandas_schema, validate_frame
from quality.schemas.segments import (
    SegmentKind,
    corrected_schema,
    query_schema,
    realtime_schema,
    segment_spec,
    validate_batch_rows,
    validate_segment,
)
from quality.schemas.spark import spark_schema, validate_spark, validate_spark_segment
from quality.schemas.spec import FrameSpec, Rule

__all__ = [
    "DEAD_LETTERS",
    "FrameSpec",
    "Rule",
    "SegmentKind",
    "archive_events_spec",
    "column_rules",
    "corrected_schema",
    "metric_rules",
    "output_rules",
    "pandas_schema",
    "query_schema",
    "realtime_schema",
    "segment_spec",
    "spark_schema",
    "validate_archive_events",
    "validate_batch_rows",
    "validate_dead_letters",
    "validate_frame",
    "validate_segment",
    "validate_spark",
    "validate_spark_segment",
]
