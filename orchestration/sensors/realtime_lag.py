"""Observe each realtime view's lag and freshness from the control store's task metrics, and
record the live half's materializations.

The stream workers, not Dagster, keep ``realtime_<view>`` up to date, so its health is
recorded as asset observations: backlog (offsets not yet processed), heartbeat age and stale
tasks (Mist's controller: stale after 5 minutes), the event-time watermark (how far the
view's windows are complete) and how old the newest processed record is. The cursor keeps
the newest heartbeat seen per view, so a tick without new reports records nothing.

The stream fleet, not a run, updates ``realtime_<view>``, so this sensor records its
materializations (no run): one when the fleet starts running the view, or the definition in
force changes (fingerprint and source in its metadata; no code-version tag: with one, Dagster would
hold the runless materialization's missing input versions against it and flag the view
unsynced for ever), and then one every
quarter of the freshness window while the view is current (tasks reporting and within the
lag SLA), so the view's freshness policy (``SLUICE_REALTIME_FRESH_MINUTES``) says fresh while
the stream keeps up and overdue once it stops or falls behind. Dagster 1.13 judges freshness
by materializations only, not observations.

A view whose tasks turn STALL, STOP or ERR is posted to the alert webhook once per incident
(:mod:`orchestration.control_plane.alerts`), and so is a view whose table lag (the oldest change
a task flushed that the publisher has not committed yet) exceeds ``SLUICE_TABLE_LAG_ALERT_S``.
Every tick also alerts (a warning in the sensor's log)
on each task of a view's topic that has been Waiting longer than ``SLUICE_TASK_WAITING_MAX_S`` (the
coordinator's watchdog should have scheduled it: something blocks it), whether or not tasks
reported.
"""

import json
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from assets.constants import realtime_key
from assets.views.lag_check import STALE_AFTER_S as REPORTING_WITHIN_S
from assets.views.lag_check import evaluate_lag
from orchestration.control_plane.alerts import Alert, post_alert
from orchestration.control_plane.fleet.scheduling import waiting_too_long
from orchestration.control_plane.lag import LagTracker, task_lags, worst
from orchestration.resources import ControlStoreResource, StorageResource
from pipelines.config import get_settings
from pipelines.control import Assignment, TaskStatus
from pipelines.exceptions import SluiceError
from pipelines.segments import table_lag_s
from pipelines.views import ResolvedView, View, resolve_views_file

__all__ = ["make_realtime_lag_sensor", "realtime_observations"]

log = logging.getLogger(__name__)

STALE_AFTER_S = 300.0


def _iso(epoch_ms: float | None) -> str:
    if epoch_ms is None:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="seconds")


def realtime_observations(
    views: Sequence[View],
    statuses: Sequence[TaskStatus],
    deployed: dict[str, str],
    *,
    now: float | None = None,
    stale_after_s: float = STALE_AFTER_S,
    table_lags: dict[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per view with reporting tasks: the lag and freshness metadata of its observation
    (``table_lag_s`` from ``table_lags``: how long the oldest unpublished change has waited)."""
    now = time.time() if now is None else now
    result: dict[str, dict[str, Any]] = {}
    lags = task_lags(statuses, stale_after_s=stale_after_s, now=now)
    for view in views:
        mine = [lag for lag in lags if lag.status.topic == view.topic]
        if not mine:
            continue
        counters = [lag.status.views.get("counters", {}).get(view.name, {}) for lag in mine]
        watermarks = [lag.status.watermark for lag in mine if lag.status.watermark is not None]
        processed_ts = [
            lag.status.last_processed_ts for lag in mine if lag.status.last_processed_ts is not None
        ]
        newest = max(processed_ts) if processed_ts else None
        time_lags = [
            0.0 if lag.backlog == 0 else now - lag.status.last_processed_ts / 1000
            for lag in mine
            if lag.backlog == 0 or lag.status.last_processed_ts is not None
        ]
        result[view.name] = {
            "tasks": len(mine),
            "tasks_stale": sum(lag.stale for lag in mine),
            "backlog": sum(lag.backlog for lag in mine),
            "max_heartbeat_age_s": round(max(lag.heartbeat_age_s for lag in mine), 3),
            "newest_heartbeat": max(lag.status.heartbeat_at for lag in mine),
            "event_time_watermark": _iso(min(watermarks) if watermarks else None),
            "newest_event_time": _iso(max(watermarks) if watermarks else None),
            "time_lag_s": round(max(time_lags), 3) if time_lags else -1.0,
            "last_processed_age_s": round(now - newest / 1000, 3) if newest else -1.0,
            "processed": sum(int(c.get("processed", 0)) for c in counters),
            "dropped_late": sum(int(c.get("dropped_late", 0)) for c in counters),
            "dead_lettered": sum(lag.status.dead_lettered for lag in mine),
            "utilization_mean": round(sum(lag.status.utilization for lag in mine) / len(mine), 4),
            "deployment_state": deployed.get(view.name, "not deployed"),
        }
        if table_lags is not None and view.name in table_lags:
            result[view.name]["table_lag_s"] = round(table_lags[view.name], 3)
    return result


def _deployment(resolved: ResolvedView | None, view: View) -> dict[str, Any]:
    """What the fleet runs of ``view``: its fingerprint, where it comes from and since when."""
    if resolved is None:
        return {"fingerprint": view.fingerprint, "source": "code location", "changed_at": ""}
    return {
        "fingerprint": resolved.view.fingerprint,
        "source": resolved.source,
        "changed_at": _iso(resolved.changed_at * 1000),
        "state": resolved.state,
    }


def _resolved_now(deployments: list[dict[str, Any]]) -> dict[str, ResolvedView]:
    """The views in force as the fleet resolves them (file and deployments); {} when the
    views file cannot be read (the sensor then goes by the code location's views)."""
    try:
        return resolve_views_file(get_settings().views_file, deployments)
    except (SluiceError, OSError) as exc:
        log.warning("realtime_lag: cannot resolve the views file: %s", exc)
        return {}


def realtime_materializations(
    views: Sequence[View],
    statuses: Sequence[TaskStatus],
    resolved: dict[str, ResolvedView],
    observed: dict[str, dict[str, Any]],
    passing: dict[str, bool],
    cursor: dict[str, Any],
    *,
    mark_every_s: float,
    now: float,
) -> list[dg.AssetMaterialization]:
    """The materializations of ``realtime_<view>`` this tick (and the cursor updated): the
    fleet started running the view or its definition changed (``why``: ``fleet started``,
    ``deployed``), or the view is current and its last one is ``mark_every_s`` old."""
    deployed = cursor.setdefault(DEPLOYED_KEY, {})
    marked = cursor.setdefault(MARKED_KEY, {})
    reporting_before = cursor.setdefault(REPORTING_KEY, {})
    reporting = {
        topic: any(
            s.topic == topic and now - s.heartbeat_at <= REPORTING_WITHIN_S for s in statuses
        )
        for topic in {v.topic for v in views}
    }
    out = []
    for view in views:
        if view.disabled or not reporting[view.topic]:
            continue
        deployment = _deployment(resolved.get(view.name), view)
        identity = f"{deployment['fingerprint']}|{deployment['source']}|{deployment['changed_at']}"
        if not reporting_before.get(view.topic):
            why = "fleet started"
        elif deployed.get(view.name) != identity:
            why = "deployed"
        elif passing.get(view.name) and now - marked.get(view.name, 0.0) >= mark_every_s:
            why = "stream current"
        else:
            continue
        deployed[view.name], marked[view.name] = identity, now
        freshness = observed.get(view.name, {})
        metadata = {
            "why": why,
            **deployment,
            **{
                k: freshness[k]
                for k in (
                    "newest_event_time",
                    "event_time_watermark",
                    "time_lag_s",
                    "backlog",
                    "table_lag_s",
                )
                if k in freshness
            },
        }
        out.append(
            dg.AssetMaterialization(
                asset_key=realtime_key(view.name),
                description=f"{why}: {deployment['source']}",
                metadata=metadata,
            )
        )
    cursor[REPORTING_KEY] = reporting
    return out


def _alert_once(
    alerted: dict[str, bool], view: str, broken: dict[str, str], metadata: dict[str, Any]
) -> None:
    """Post one alert when ``view``'s tasks turn STALL, STOP or ERR (an incident), none while
    it lasts; the incident ends when no task of the view is broken."""
    if not broken:
        alerted.pop(view, None)
        return
    if alerted.get(view):
        return
    alerted[view] = True
    tasks = ", ".join(f"{t} {s}" for t, s in sorted(broken.items()))
    post_alert(
        Alert(
            kind="realtime_lag",
            title=f"realtime view {view}: {len(broken)} task(s) {worst(list(broken.values()))}",
            details=f"{tasks}; backlog {metadata.get('backlog', '?')}, time lag "
            f"{metadata.get('time_lag_s', '?')} s (Burrow's statuses; sluice status shows them)",
            ui_path=f"/assets/{realtime_key(view).path[-1]}",
        )
    )


def _alert_table_lag(alerted: dict[str, bool], view: str, lag_s: float, limit_s: float) -> bool:
    """Post one alert when ``view``'s table lag exceeds ``limit_s`` (an incident), none while
    it lasts; the incident ends when the lag is back within it. True when posted."""
    if lag_s <= limit_s:
        alerted.pop(view, None)
        return False
    if alerted.get(view):
        return False
    alerted[view] = True
    post_alert(
        Alert(
            kind="table_lag",
            title=f"view {view}: its table lags the stream by {lag_s:.0f} s",
            details=f"the oldest change a task flushed has waited {lag_s:.0f} s for the realtime "
            f"publisher (SLUICE_TABLE_LAG_ALERT_S {limit_s:g} s): is an agent leading, and "
            "do its publish passes fail? (sluice status, the leader's log)",
            ui_path=f"/assets/{realtime_key(view).path[-1]}",
        )
    )
    return True


def _table_lags(storage: StorageResource, views: Sequence[View], now: float) -> dict[str, float]:
    """Each enabled view's table lag; {} when the storage cannot be read (logged)."""
    try:
        store = storage.open()
        return {v.name: table_lag_s(store, v.name, now) for v in views if not v.disabled}
    except Exception as exc:  # a disk or S3 error alike: the other observations still count
        log.warning("realtime_lag: cannot read the change log: %s", exc)
        return {}


ALERTED_KEY = "_alerted"
"""Cursor key: the views whose broken tasks have been alerted on (an incident under way)."""
TABLE_ALERTED_KEY = "_table_alerted"
"""Cursor key: the views whose table lag has been alerted on (an incident under way)."""
DEPLOYED_KEY = "_deployed"
MARKED_KEY = "_marked"
REPORTING_KEY = "_reporting"
"""Cursor keys: the deployment last recorded per view, when each view was last recorded, and
whether each topic's fleet reported on the previous tick."""
TRACKER_KEY = "_lag_tracker"
"""Where the cursor keeps the Burrow windows
(:class:`orchestration.control_plane.lag.LagTracker`)."""
WINDOW = 10


def _waiting_too_long(
    context: dg.SensorEvaluationContext,
    views: Sequence[View],
    assignments: Sequence[Assignment],
    waiting_max_s: float,
) -> dict[str, dict[str, str]]:
    """Per topic: its tasks Waiting longer than ``waiting_max_s`` and why; each view of the
    topic gets an alert naming them."""
    now = time.time()
    overdue: dict[str, dict[str, str]] = {}
    for a in waiting_too_long(assignments, now, waiting_max_s):
        mark = f" for {a.handoff_to}" if a.handoff_to else ""
        overdue.setdefault(a.topic, {})[a.task] = (
            f"Waiting{mark} for {now - a.since:.0f}s: {a.reason}"
        )
    for view in views:
        tasks = overdue.get(view.topic)
        if tasks:
            context.log.warning(
                "pipeline alert for %s: %d task(s) Waiting longer than %gs "
                "(SLUICE_TASK_WAITING_MAX_S): %s",
                view.name,
                len(tasks),
                waiting_max_s,
                "; ".join(f"{t} {why}" for t, why in sorted(tasks.items())),
            )
    return overdue


def make_realtime_lag_sensor(
    views: Sequence[View],
    *,
    name: str = "realtime_lag",
    minimum_interval_seconds: int = 30,
    stale_after_s: float = STALE_AFTER_S,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    lag_sla_s: float | None = None,
    waiting_max_s: float = 60.0,
    fresh_minutes: float = 10.0,
    table_lag_alert_s: float = 300.0,
    clock: Callable[[], float] = time.time,
) -> dg.SensorDefinition:
    """A sensor recording an observation of ``realtime_<view>`` whenever its tasks reported
    and, with ``lag_sla_s``, the view's ``lag_within_sla`` check on every tick (a fleet that
    stopped reporting fails it: that is when it matters). It alerts on tasks Waiting longer
    than ``waiting_max_s`` (``SLUICE_TASK_WAITING_MAX_S``), and records the realtime
    materializations (:func:`realtime_materializations`; a current view every quarter of
    ``fresh_minutes``). Each view's table lag (the oldest change not yet published, from the
    change log in ``storage``) is in its observation and materializations, and alerted on once
    it exceeds ``table_lag_alert_s``."""
    views = list(views)

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Records lag and freshness of every realtime view from the control store.",
    )
    def _sensor(
        context: dg.SensorEvaluationContext,
        control_store: ControlStoreResource,
        storage: StorageResource,
    ) -> dg.SensorResult | dg.SkipReason:  # observations and check evaluations
        cursor: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        cursor.pop("_samples", None)  # the windows as kept before the LagTracker
        tracker = LagTracker.from_state(cursor.pop(TRACKER_KEY, None), WINDOW, stale_after_s)
        now = clock()
        control = control_store.open()
        try:
            statuses = control.tasks()
            deployments = control.deployed_views()
            assignments = control.jobs.assignments()
        finally:
            control.close()
        deployed = {d["name"]: d["state"] for d in deployments}
        overdue = _waiting_too_long(context, views, assignments, waiting_max_s)
        table_lags = _table_lags(storage, views, now)
        observed = realtime_observations(
            views, statuses, deployed, stale_after_s=stale_after_s, now=now, table_lags=table_lags
        )
        for view_name, lag_s in table_lags.items():
            if _alert_table_lag(
                cursor.setdefault(TABLE_ALERTED_KEY, {}), view_name, lag_s, table_lag_alert_s
            ):
                context.log.warning(
                    "pipeline alert for %s: table lag %.0f s (over %g s)",
                    view_name,
                    lag_s,
                    table_lag_alert_s,
                )
        checks = {
            view.name: evaluate_lag(view, statuses, lag_sla_s or 600.0, now=now)
            for view in views
            if not view.disabled and any(s.topic == view.topic for s in statuses)
        }
        made = realtime_materializations(
            views,
            statuses,
            _resolved_now(deployments),
            observed,
            {name: check.passed for name, check in checks.items()},
            cursor,
            mark_every_s=fresh_minutes * 60 / 4,
            now=now,
        )
        health = tracker.update(task_lags(statuses, stale_after_s=stale_after_s))
        events: list[Any] = list(made)
        for view_name, metadata in observed.items():
            newest = metadata.pop("newest_heartbeat")
            topic = next(v.topic for v in views if v.name == view_name)
            mine = {t: s for t, s in health.items() if t.rpartition(":")[0] == topic}
            metadata["status"] = worst(list(mine.values()))
            metadata["task_status"] = dg.MetadataValue.json(mine)
            metadata["tasks_waiting_too_long"] = dg.MetadataValue.json(overdue.get(topic, {}))
            broken = {t: s for t, s in mine.items() if s in ("STALL", "STOP", "ERR")}
            if broken:
                context.log.warning(
                    "pipeline alert for %s: %s",
                    view_name,
                    ", ".join(f"{t} {s}" for t, s in sorted(broken.items())),
                )
            _alert_once(cursor.setdefault(ALERTED_KEY, {}), view_name, broken, metadata)
            if newest <= cursor.get(view_name, 0.0):
                continue
            cursor[view_name] = newest
            events.append(dg.AssetObservation(asset_key=realtime_key(view_name), metadata=metadata))
        cursor[TRACKER_KEY] = tracker.state()
        if lag_sla_s is not None:
            events += list(checks.values())
        if not events:
            return dg.SensorResult(
                skip_reason="no new task reports since the last tick",
                cursor=json.dumps(cursor, sort_keys=True),
            )
        return dg.SensorResult(asset_events=events, cursor=json.dumps(cursor, sort_keys=True))

    return _sensor
