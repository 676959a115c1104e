"""The blocking ``nothing_lost`` check of ``raw_archive``: no offset lost between broker and archive.

For the hours of the run (every archived hour when the run is not partitioned) it runs
:func:`quality.lineage.check_nothing_lost` against the broker's log start and end offsets, so
a gap says whether a replay can still recover it. When no broker answers it falls back to the
archive alone and says so (severity WARN if nothing else is wrong). Being blocking, a failure
stops anything downstream of the archive in the same run. :func:`evaluate_nothing_lost` is the
check's body, callable without Dagster's machinery.
"""

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import dagster as dg
from kafka import TopicPartition
from kafka.errors import KafkaError

from assets.constants import RAW_ARCHIVE_KEY
from assets.run_window import run_hours
from orchestration.resources import KafkaResource, StorageResource
from pipelines.exceptions import BrokerUnavailable
from pipelines.kafka import beginning_offsets, consumer, end_offsets, partitions_of
from pipelines.storage import ObjectStore
from quality.lineage import HourLineage, check_nothing_lost

__all__ = [
    "NOTHING_LOST_CHECK",
    "broker_offset_bounds",
    "build_nothing_lost_check",
    "evaluate_nothing_lost",
    "nothing_lost_result",
]

log = logging.getLogger(__name__)

NOTHING_LOST_CHECK = "nothing_lost"
MAX_FAILURES = 20
"""Failure messages kept in the metadata; the description names the first three."""
HIGHWATER_WAIT_S = 3.0


def broker_offset_bounds(
    kafka: KafkaResource, topics: Iterable[str]
) -> dict[tuple[str, int], tuple[int, int]]:
    """Per ``(topic, partition)``: the broker's (log start, log end) offsets.

    ``end_offsets`` alone can under-report (the embedded broker answers with the last batch's
    base offset + 1), which would look like archived offsets the broker never had, so the end
    is the larger of it and the high watermark of one fetch near the end.
    """
    client = consumer(kafka.bootstrap(), kafka.client_settings(), fetch_max_wait_ms=50)
    try:
        tps = [
            TopicPartition(topic, p)
            for topic in topics
            for p in partitions_of(kafka.bootstrap(), kafka.client_settings(), topic)
        ]
        if not tps:
            return {}
        client.assign(tps)
        starts = beginning_offsets(client, tps)
        ends = end_offsets(client, tps)
        for tp in tps:
            client.seek(tp, max(starts[tp], ends[tp] - 1))
        deadline = time.monotonic() + HIGHWATER_WAIT_S
        while time.monotonic() < deadline and any(client.highwater(tp) is None for tp in tps):
            client.poll(timeout_ms=100, max_records=1, update_offsets=False)
        bounds = {}
        for tp in tps:
            end = max(ends[tp], client.highwater(tp) or 0)
            bounds[(tp.topic, tp.partition)] = (starts[tp], end)
        return bounds
    finally:
        client.close()


def _hour_metadata(hour: HourLineage) -> dict[str, Any]:
    return {
        "events": hour.events,
        "dead_letters": hour.dead_letters,
        "produced": hour.produced,
        "passed": hour.passed,
        "missing": {k: [list(r) for r in v] for k, v in hour.missing.items()},
        "missing_files": [f for p in hour.partitions for f in p.missing_files],
    }


def nothing_lost_result(
    report: Sequence[HourLineage], broker_problem: str | None = None
) -> dg.AssetCheckResult:
    """The check result of a report: per hour its counts and missing ranges per partition."""
    failures = [f"{h.label}: {f}" for h in report for f in h.failures]
    notes = sorted({n for h in report for n in h.as_dict()["notes"]})
    metadata: dict[str, Any] = {
        "hours": len(report),
        "hours_failed": sum(not h.passed for h in report),
        "broker": f"unreachable, archive-only check: {broker_problem}"
        if broker_problem
        else "log start and end offsets compared",
        "failures": dg.MetadataValue.json(
            failures[:MAX_FAILURES]
            + (
                [f"... and {len(failures) - MAX_FAILURES} more"]
                if len(failures) > MAX_FAILURES
                else []
            )
        ),
        "notes": dg.MetadataValue.json(notes[:MAX_FAILURES]),
    }
    for hour in report:
        metadata[f"hour {hour.label}"] = dg.MetadataValue.json(_hour_metadata(hour))
    if failures:
        description = "; ".join(failures[:3]) + (
            f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        )
    else:
        description = (
            f"nothing lost in {len(report)} hour(s): every archived offset range holds each of "
            f"its offsets once, as an event or a dead letter, and the ranges chain without holes"
        )
    if broker_problem:
        description += f" (archive only: broker unreachable: {broker_problem})"
    warn_only = not failures and broker_problem is not None
    return dg.AssetCheckResult(
        passed=not failures,
        severity=dg.AssetCheckSeverity.WARN if warn_only else dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description=description,
    )


def evaluate_nothing_lost(
    store: ObjectStore, hours: Iterable[int] | None, kafka: KafkaResource | None
) -> dg.AssetCheckResult:
    """Check ``hours`` (None = every archived hour), with the broker's offsets when it answers."""
    problems: list[str] = []

    def offsets(topics: Sequence[str]) -> dict[tuple[str, int], tuple[int, int]] | None:
        if kafka is None:
            problems.append("no Kafka resource")
            return None
        try:
            return broker_offset_bounds(kafka, topics)
        except (BrokerUnavailable, KafkaError, OSError) as exc:
            log.warning("nothing_lost: broker unreachable, checking the archive alone: %s", exc)
            problems.append(str(exc) or type(exc).__name__)
            return None

    report = check_nothing_lost(store, hours, broker_offsets=offsets)
    return nothing_lost_result(report, problems[0] if problems else None)


def build_nothing_lost_check() -> dg.AssetChecksDefinition:
    """The blocking check of ``raw_archive`` for the hours its run recorded."""

    @dg.asset_check(
        asset=RAW_ARCHIVE_KEY,
        name=NOTHING_LOST_CHECK,
        blocking=True,
        description="Nothing lost: each archived offset range holds every one of its offsets "
        "once (events + dead letters = produced), ranges chain without holes from the broker's "
        "log start, and no listed file is missing.",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, storage: StorageResource, kafka: KafkaResource
    ) -> dg.AssetCheckResult:
        return evaluate_nothing_lost(storage.open(), run_hours(context), kafka)

    return _check
