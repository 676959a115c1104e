"""The Spark correction as a job Dagster launches through Pipes, outside the run worker.

``corrected_<view>`` assets do not start Spark themselves: they launch this file with
``spark-submit`` (one machine, :class:`~orchestration.resources.LocalSparkResource`) or as an
EMR Serverless job run (production), and the job reports back through ``dagster-pipes``: one
materialization per view with per-segment metadata, and the result of the segment rules
(the check that stops a violating segment from being published). One file for both places, so
what runs on EMR is what the tests ran. The run worker never imports pyspark.

The request arrives as the Pipes session's extras (:class:`CorrectionRequest`): the view
definitions the code location has (so the job computes exactly what the assets describe), the
hour starts and the storage root. Spark settings come from ``SLUICE_SPARK_*`` and from
``spark-submit``'s own options, which win (:func:`pipelines.batch.spark.build_spark`).

Started by hand, outside Dagster, it exits with status 2 and says so: ``sluice batch correct``
is the command for that.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from dagster_pipes import (
    PipesContext,
    PipesDefaultContextLoader,
    PipesDefaultMessageWriter,
    PipesEnvVarParamsLoader,
    PipesMessageWriter,
    PipesParamsLoader,
)

from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import SluiceError

__all__ = ["SEGMENT_RULES_CHECK", "CorrectionRequest", "ServerLost", "main", "run_correction"]

log = logging.getLogger(__name__)

SEGMENT_RULES_CHECK = "segment_rules"
"""The check the job reports per view: every published segment held the view's value rules."""


@dataclass(frozen=True)
class CorrectionRequest:
    """What one launch corrects: views by definition, the hours, the storage root, the asset
    key (Pipes' slash-separated form) each view reports under, and the declarations of the
    views' topics (so a job on another machine reads no local topics file)."""

    definitions: list[dict[str, Any]]
    hours: list[int]
    storage_root: str
    asset_keys: dict[str, str]
    topics: list[dict[str, Any]] = field(default_factory=list)
    """Each topic's declaration (:class:`~pipelines.events.declaration.TopicDeclaration` as
    JSON); none: the job's own topics file declares them."""

    @property
    def declarations(self) -> dict[str, TopicDeclaration] | None:
        """The topics' declarations by topic, None when the request carries none."""
        if not self.topics:
            return None
        found = (TopicDeclaration.model_validate(t) for t in self.topics)
        return {d.topic: d for d in found}

    def extras(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_extras(cls, extras: Mapping[str, Any]) -> CorrectionRequest:
        missing = {f.name for f in fields(cls) if f.name != "topics"} - set(extras)
        if missing:
            raise ValueError(f"the correction request lacks {sorted(missing)}")
        return cls(
            definitions=list(extras["definitions"]),
            hours=[int(h) for h in extras["hours"]],
            storage_root=str(extras["storage_root"]),
            asset_keys=dict(extras["asset_keys"]),
            topics=list(extras.get("topics") or []),
        )


class _RulesBroken(Exception):
    def __init__(self, view: str, error: Exception) -> None:
        super().__init__(f"{view}: {error}")
        self.view, self.error = view, error


def _segment(result: Any) -> dict[str, Any]:
    return {
        "segment_start_ms": result.segment_start_ms,
        "version": result.version,
        "rows": result.rows,
        "events": result.events,
        "duplicates_dropped": result.duplicates_dropped,
        "files": list(result.files),
        "seconds": round(result.seconds, 3),
        "skipped": result.skipped,
        "reason": result.reason,
    }


def _materialization(results: Sequence[Any], seconds: float, where: str) -> dict[str, Any]:
    skipped = sum(r.skipped for r in results)
    rows = sum(r.rows for r in results)
    return {
        "segments_published": len(results) - skipped,
        "segments_skipped": skipped,
        "dagster/row_count": rows,
        "rows": rows,
        "events": sum(r.events for r in results),
        "duplicates_dropped": sum(r.duplicates_dropped for r in results),
        "spark_seconds": round(seconds, 3),
        "spark_session": where,
        "segments": {"raw_value": [_segment(r) for r in results], "type": "json"},
    }


def run_correction(pipes: PipesContext, spark: Any = None) -> None:
    """Correct what the session's extras ask for and report it; ``spark`` reuses a session."""
    from pipelines.batch import correct_hours
    from pipelines.batch.config import SparkSettings
    from pipelines.batch.spark import build_spark
    from pipelines.config import get_settings
    from pipelines.storage import open_store
    from pipelines.tables import TablesConfig, ViewTables
    from pipelines.views import parse_views
    from quality import schemas
    from quality.exceptions import SchemaViolation

    request = CorrectionRequest.from_extras(pipes.extras)
    views = parse_views(
        request.definitions, source="the correction request", topics=request.declarations
    )
    settings = get_settings()
    spark_settings = SparkSettings()
    started = time.monotonic()
    remote = spark_settings.remote if spark is None else None
    if remote:
        spark = _remote_session(remote, settings.resolved_state_dir, pipes.log.warning)
    elif spark is None:
        spark = build_spark(spark_settings, s3_endpoint_url=settings.s3_endpoint_url)
    where = _where(remote, spark)
    pipes.log.info(f"Spark ready in {time.monotonic() - started:.1f} s ({where})")
    store = open_store(request.storage_root, settings.s3_endpoint_url)

    def validate(rows: Any, view: Any) -> None:
        # On the collected rows, in this process: a Spark job and several round trips to the
        # server per view otherwise (about a sixth of a small correction's time).
        try:
            schemas.validate_batch_rows(rows, view)
        except SchemaViolation as exc:  # a Spark failure is not a broken rule: it is retried
            raise _RulesBroken(view.name, exc) from exc

    def progress(result: Any) -> None:
        state = "skipped: " + result.reason if result.skipped else f"v{result.version}"
        pipes.log.info(f"{result.view} {result.segment_start_ms}: {state}, {result.rows} rows")

    started = time.monotonic()
    tables = ViewTables(TablesConfig.from_settings(settings, request.storage_root))
    try:
        results = correct_hours(
            spark,
            store,
            views,
            request.hours,
            s3_scheme=spark_settings.s3_scheme,
            on_result=progress,
            validate_rows=validate,
            tables=tables,
            run_id=str(getattr(pipes, "run_id", "") or ""),
        )
    except _RulesBroken as broken:
        # nothing of the view was published; the orchestrator fails the run with this check
        pipes.log.error(f"segment rules broken, not published: {broken}")
        pipes.report_asset_check(
            SEGMENT_RULES_CHECK,
            passed=False,
            severity="ERROR",
            metadata={"violation": {"raw_value": str(broken.error), "type": "text"}},
            asset_key=request.asset_keys[broken.view],
        )
        return
    except Exception as exc:
        if remote and _lost_server(exc):
            lost = ServerLost(
                f"lost the Spark Connect server at {remote} during the correction "
                f"({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}); nothing "
                "of the unfinished views was published, and the run's retry corrects them again"
            )
            pipes.log.error(str(lost))
            raise lost from exc
        raise
    finally:
        tables.close()
        if remote:
            with contextlib.suppress(Exception):
                spark.stop()  # releases a session of its own; a shared one stays open
    seconds = time.monotonic() - started
    for view in views:
        mine = [r for r in results if r.view == view.name]
        key = request.asset_keys[view.name]
        pipes.report_asset_check(
            SEGMENT_RULES_CHECK,
            passed=True,
            # Kinds without value rules (sessions) validate none of their segments.
            metadata={"segments_validated": _validated(view, mine)},
            asset_key=key,
        )
        pipes.report_asset_materialization(
            metadata=_materialization(mine, seconds, where), asset_key=key
        )


def _validated(view: Any, results: Sequence[Any]) -> int:
    """How many of the view's segments the correction checked with its value rules."""
    from pipelines.kinds import kind_of

    return sum(not r.skipped for r in results) if kind_of(view).value_rules else 0


def _remote_session(url: str, state_dir: Any, say: Any) -> Any:
    """The warm server's session: the shared one the launch named (renewed in the keeper's
    record if the server no longer knows it), else one of this job's own."""
    from orchestration.control_plane.spark.server import SparkConnectServer
    from orchestration.control_plane.spark.session import open_session

    return open_session(url, SparkConnectServer(state_dir).renew_session, say)


def _where(remote: str | None, spark: Any) -> str:
    """Where the job computes, for its log and its materializations' metadata: the session
    it got, which is not the one the launch named when the server had refused that."""
    if not remote:
        return "own JVM"
    from orchestration.control_plane.spark.session import server_url, session_id_of

    where = f"Spark Connect {server_url(remote)}"
    return where + (f", shared session {spark.session_id[:8]}" if session_id_of(remote) else "")


class ServerLost(SluiceError, RuntimeError):
    """The Spark Connect server went away under a correction (killed, restarted, crashed)."""


def _lost_server(exc: BaseException) -> bool:
    """A gRPC failure to reach the server, or a server that no longer knows the session."""
    text = f"{type(exc).__name__} {exc}"
    signs = ("UNAVAILABLE", "Connection refused", "SESSION_NOT_FOUND", "OPERATION_NOT_FOUND")
    signs += ("Socket closed", "RetriesExceeded", "GrpcException", "CANCELLED", "INVALID_HANDLE")
    signs += ("NO_ACTIVE_SESSION",)
    return any(sign in text for sign in signs)


def _message_writer(loader: PipesParamsLoader) -> PipesMessageWriter:
    """S3 when the orchestrator reads messages from a bucket (EMR), else its default channel."""
    if "bucket" in loader.load_messages_params():
        import boto3
        from dagster_pipes import PipesS3MessageWriter

        from pipelines.config import get_settings

        endpoint = get_settings().s3_endpoint_url
        return PipesS3MessageWriter(boto3.client("s3", endpoint_url=endpoint), interval=2)
    return PipesDefaultMessageWriter()


def main(
    params_loader: PipesParamsLoader | None = None,
    message_writer: PipesMessageWriter | None = None,
    spark: Any = None,
) -> int:
    """The job's entry point: 0 once reported, 2 when not launched through Dagster Pipes."""
    loader = params_loader or PipesEnvVarParamsLoader()
    if not loader.is_dagster_pipes_process():
        print(
            "correction_job runs when Dagster launches it (the corrected_<view> assets); "
            "to correct hours by hand use `sluice batch correct --hour ...`",
            file=sys.stderr,
        )
        return 2
    writer = message_writer or _message_writer(loader)
    with PipesContext(loader, PipesDefaultContextLoader(), writer) as pipes:
        run_correction(pipes, spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
