"""Dagster jobs: the hourly correction over assets, recovery, table maintenance, the Spark
check; ``orchestration/definitions.py`` collects them."""
