"""A new Spark Connect server's first correction, on a few thousand synthetic events.

A JVM compiles Spark's hot paths (whole-stage codegen, the Parquet reader, the sketches'
aggregates) as they run, so a new server's first real correction would pay for it, running
markedly slower than the next (docs/benchmarks.md). The keeper runs this once per JVM, in a
process of its own, with a Spark session of its own (the shared session's settings belong to
the corrections) and into a temporary directory it removes. A correction that arrives meanwhile
just shares the JVM; a failed warm-up is logged and changes nothing else.
``SLUICE_SPARK_WARM_UP=false`` turns it off.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["WARM_UP_EVENTS", "main", "warm_up"]

log = logging.getLogger(__name__)

WARM_UP_EVENTS = 3000
"""Enough for every view's plan to run on every code path; a few seconds of a warm JVM."""


def warm_up(url: str, views_file: Path, events: int = WARM_UP_EVENTS) -> float:
    """Correct ``events`` synthetic events of the views in ``views_file`` on the server at
    ``url``; the seconds it took."""
    from pyspark.sql import SparkSession

    from pipelines.batch import correct_hours
    from pipelines.tables import TablesConfig, ViewTables
    from pipelines.testing import run_stream
    from pipelines.views import load_views

    views = [v for v in load_views(views_file) if not v.disabled]
    scratch = Path(tempfile.mkdtemp(prefix="sluice-warm-up-"))
    started = time.monotonic()
    try:
        run = run_stream(scratch / "root", views, max_events=events, trace="nyc_taxi")
        tables = ViewTables(
            TablesConfig(warehouse=str(scratch / "root"), catalog_url=f"sqlite:///{scratch}/c.db")
        )
        spark = SparkSession.builder.remote(url).create()
        try:
            correct_hours(spark, run.store, views, run.event_hours(), tables=tables)
        finally:
            spark.stop()
            tables.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    from pipelines.config import get_settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server, sc://host:port")
    parser.add_argument("--events", type=int, default=WARM_UP_EVENTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        seconds = warm_up(args.url, get_settings().views_file, args.events)
    except Exception:
        log.exception("the Spark Connect server's warm-up failed (corrections are unaffected)")
        return 1
    log.info("Spark Connect server at %s warmed up in %.1f s", args.url, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
