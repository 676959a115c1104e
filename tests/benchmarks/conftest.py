from tests.fixtures.spark import spark  # noqa: F401  (session-scoped SparkSession)
