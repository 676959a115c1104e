"""Alerts that reach someone: a failed run, a failed ERROR check, posted to the webhook.

Both sensors are on by default and post nothing while ``SLUICE_ALERT_WEBHOOK_URL`` is unset
(:mod:`orchestration.control_plane.alerts`). ``alert_on_run_failure`` is Dagster's run-failure
sensor: it sees each failed run once (its cursor is the run-status event) and posts one alert
linking the run. ``alert_on_check_failure`` reads each asset check's latest execution and posts when
a check fails with ERROR severity after it had not been failing (one alert per incident: a check
that keeps failing run after run is not posted again until it has passed), reading every execution
since its last tick in order, so the hour of a partitioned check that failed is named even when
later hours passed; WARN results, such as ``lag_within_sla``, do not page: the realtime_lag sensor
alerts on the tasks themselves.
"""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from orchestration.control_plane.alerts import Alert, post_alert

__all__ = ["CHECK_ALERT_SENSOR", "RUN_ALERT_SENSOR", "make_alert_sensors"]

RUN_ALERT_SENSOR = "alert_on_run_failure"
HISTORY = 100
"""Executions of one check read per tick (a range run of a partitioned check logs one per hour)."""
CHECK_ALERT_SENSOR = "alert_on_check_failure"


def run_failure_alert(run_id: str, job_name: str, message: str) -> Alert:
    return Alert(
        kind="run_failure",
        title=f"run of {job_name} failed",
        details=f"run {run_id}: {message[:500]}",
        ui_path=f"/runs/{run_id}",
    )


def check_failure_alert(
    check: dg.AssetCheckKey, run_id: str, description: str | None, partition: str | None
) -> Alert:
    asset = check.asset_key.to_user_string()
    where = f" (hour {partition})" if partition else ""
    return Alert(
        kind="check_failure",
        title=f"check {check.name} of {asset} failed{where}",
        details=f"run {run_id}: {(description or 'no description')[:500]}",
        ui_path=f"/assets/{'/'.join(check.asset_key.path)}?view=checks",
    )


def _failing(record: Any) -> tuple[bool, str | None]:
    """(failed with ERROR severity, its description) of an asset check execution record."""
    event = record.event
    evaluation = event.dagster_event.event_specific_data if event and event.dagster_event else None
    if evaluation is None or not hasattr(evaluation, "passed"):
        return False, None
    failed = not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    return failed, evaluation.description


def make_alert_sensors(minimum_interval_seconds: int = 30) -> list[dg.SensorDefinition]:
    """The run-failure and the check-failure alert sensors."""

    @dg.run_failure_sensor(
        name=RUN_ALERT_SENSOR,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Posts one alert per failed run to SLUICE_ALERT_WEBHOOK_URL (if set).",
    )
    def alert_on_run_failure(context: dg.RunFailureSensorContext) -> None:
        run = context.dagster_run
        message = context.failure_event.message or "failed"
        posted = post_alert(run_failure_alert(run.run_id, run.job_name, message))
        context.log.info("run %s failed; alert %s", run.run_id, "posted" if posted else "off")

    @dg.sensor(
        name=CHECK_ALERT_SENSOR,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Posts an alert to SLUICE_ALERT_WEBHOOK_URL (if set) when an asset check "
        "fails with ERROR severity after it had not been failing: once per incident.",
    )
    def alert_on_check_failure(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        cursor: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        keys = list(context.repository_def.asset_graph.asset_check_keys)
        storage = context.instance.event_log_storage
        posted = 0
        for key in keys:
            name = key.to_user_string()
            seen = cursor.get(name, {"id": 0, "failing": False})
            hour_runs: list[str] = seen.get("hour_runs", [])
            # every execution since the last tick, oldest first: a partitioned check's hours
            # each have one, and a later hour's success must not hide an earlier one's failure
            history = storage.get_asset_check_execution_history(key, limit=HISTORY)
            for record in sorted((r for r in history if r.id > seen["id"]), key=lambda r: r.id):
                if record.status.value == "PLANNED":
                    run = context.instance.get_run_by_id(record.run_id)
                    if run is not None and not run.is_finished:
                        break  # its run is evaluating it: look again next tick
                    continue  # its run ended without evaluating it: nothing to say
                if record.partition is not None:
                    hour_runs = [*hour_runs, record.run_id][-5:]
                elif record.run_id in hour_runs:
                    seen = {**seen, "id": record.id}  # a range run's summary: its hours spoke
                    continue
                failed, description = _failing(record)
                if failed and not seen["failing"]:
                    alert = check_failure_alert(key, record.run_id, description, record.partition)
                    posted += post_alert(alert)
                seen = {"id": record.id, "failing": failed}
            cursor[name] = {**seen, "hour_runs": hour_runs}
        context.update_cursor(json.dumps(cursor, sort_keys=True))
        return dg.SkipReason(f"{posted} alert(s) posted" if posted else "no new check failure")

    return [alert_on_run_failure, alert_on_check_failure]
