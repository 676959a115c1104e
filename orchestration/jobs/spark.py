"""The Spark resource's check, as a job an operator launches from the Dagster UI.

``check_spark`` asks the ``spark`` resource whether corrections will find a warm Spark (the
local Spark Connect server: running, its URL, PID, memory, uptime and restarts; on EMR
Serverless: the application's state and pre-initialized capacity) and fails, with the
reason, when they would not: they would still run, but pay a cold start each.
"""

import dagster as dg

from orchestration.resources.spark import SparkResource

__all__ = ["CHECK_SPARK_JOB", "check_spark"]

CHECK_SPARK_JOB = "check_spark"


@dg.op(description="Whether corrections find a warm Spark, and its memory (fails if not).")
def check_spark_op(context: dg.OpExecutionContext, spark: SparkResource) -> dg.Output[bool]:
    outcome = spark.check()
    context.log.info(outcome.description)
    if not outcome.passed:
        raise dg.Failure(outcome.description, metadata=outcome.metadata, allow_retries=False)
    return dg.Output(True, metadata={"status": outcome.description, **outcome.metadata})


@dg.job(name=CHECK_SPARK_JOB, description=__doc__.split("\n\n")[1].replace("\n", " "))
def check_spark() -> None:
    check_spark_op()
