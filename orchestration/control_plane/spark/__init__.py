"""Spark for the corrections: the warm Spark Connect server and its keeper, its warm-up, the
one shared session, and the correction job Dagster Pipes submits."""
