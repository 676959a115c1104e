"""Close archive hours by event time, so corrections follow the stream, not the wall clock.

An hour of ``raw_archive`` is complete when the fleet's watermark (the smallest of its tasks'
event-time watermarks) has passed the hour's end plus the views' largest allowed lateness and
the correction grace: no in-time event can still land in it. Hours without events close too
(from the start of the first archived day), so a day whose stream began at 21:00 or paused
overnight still becomes complete and reported. The sensor then records the
hour's completeness as a materialization of that partition (no run, nothing copied), and the
corrected views follow through their automation conditions. A replayed day, whose event time
lies years in the past, closes as the replay goes, which a wall-clock schedule never does.

A stream that stops (the end of a replay) never moves its watermark past its last hour. When
every task has caught up and the watermark has not moved for ``idle_close_s``, the sensor
closes the hours up to the watermark's hour as well. A bounded input says when it is over
instead: `sluice generate` records its topic's end offsets when the replay ends
(:mod:`pipelines.control.inputs`), and once every task has checkpointed through them the
last hours close on that tick, without the idle wait.

One run per closed stretch: while the fleet's watermark trails the wall clock (a replay, a
backlog), the hours it closes are held and recorded together when the stretch ends, at most
two days at a time (:func:`catching_up`), so the automation corrects them in one run (one backfill,
single-run policy) instead of one per tick.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from assets.constants import RAW_ARCHIVE_KEY
from assets.partitions import FIRST_HOUR_MS, in_partitions, partition_key_for
from assets.raw.archive import hour_metadata
from orchestration.resources import ControlStoreResource, StorageResource
from pipelines.control import TaskStatus
from pipelines.segments import HOUR_MS, hours_with_events
from pipelines.views import View
from quality.completeness import archive_completeness

__all__ = ["MAX_STRETCH_HOURS", "catching_up", "closed_until", "make_archive_hours_sensor"]

DAY_MS = 24 * HOUR_MS


def closed_until(
    statuses: Sequence[TaskStatus],
    topic: str,
    closing_ms: int,
    *,
    idle: bool,
    ended: bool = False,
) -> int | None:
    """Event time before which the topic's hours are complete; None until every task reported
    a watermark. ``idle``: the fleet caught up and its watermark stopped, the stream ended.
    ``ended``: every task read its partition's input to its recorded end, so no event is to
    come and the hour of the furthest watermark is complete too (the quietest partition's,
    which ``idle`` alone waits for, may end hours earlier)."""
    mine = [s for s in statuses if s.topic == topic]
    if not mine or any(s.watermark is None for s in mine):
        return None
    watermark = int((max if ended else min)(s.watermark for s in mine))
    if idle or ended:
        return watermark - watermark % HOUR_MS + HOUR_MS
    return watermark - closing_ms


MAX_STRETCH_HOURS = 48
"""Most hours held back for one run while a fleet catches up: two days, so a replayed day and
the empty hours of the day before (its first late events close that day too) stay one run."""


def catching_up(now_s: float, watermark: float | None, closing_ms: int, held: int) -> bool:
    """Whether hours that closed now belong to a stretch that is still closing: the fleet's
    watermark trails the wall clock by more than an hour beyond the closing time (a replay
    of past event time, or a backlog being read), and fewer than :data:`MAX_STRETCH_HOURS`
    are waiting. Such hours are recorded together when the stretch ends (the fleet idles or
    reaches the present), so automation corrects them in one run instead of one per tick;
    a live stream's hours close one by one."""
    if watermark is None or held >= MAX_STRETCH_HOURS:
        return False
    return now_s * 1000 - watermark > closing_ms + HOUR_MS


def _closed_by(ended: bool, idle: bool) -> str:
    if ended:
        return "end_of_input"
    return "idle" if idle else "watermark"


def make_archive_hours_sensor(
    views: Sequence[View],
    grace_minutes: int,
    *,
    idle_close_s: float = 300.0,
    name: str = "archive_hours_complete",
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    clock: Callable[[], float] = time.time,
) -> dg.SensorDefinition:
    """The sensor recording each archived hour of ``raw_archive`` once the fleet closed it."""
    enabled = [v for v in views if not v.disabled]
    topics = sorted({v.topic for v in enabled})
    lateness = {
        t: max(v.allowed_lateness_ms for v in enabled if v.topic == t) + grace_minutes * 60_000
        for t in topics
    }

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Records an archived hour of raw_archive as complete once the fleet's "
        "event-time watermark has passed it (plus allowed lateness and the correction grace); "
        "the corrected views and the daily report follow by their automation conditions.",
    )
    def _sensor(
        context: dg.SensorEvaluationContext,
        control_store: ControlStoreResource,
        storage: StorageResource,
    ) -> dg.SensorResult:
        cursor: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        control = control_store.open()
        try:
            statuses = control.tasks()
            input_ends = {t: control.input_ends.of_topic(t) for t in topics}
        finally:
            control.close()
        now = clock()
        store = storage.open()
        events = []
        for topic in topics:
            state = cursor.setdefault(topic, {"closed": None, "watermark": None, "since": now})
            mine = [s for s in statuses if s.topic == topic]
            watermark = min((s.watermark or 0.0 for s in mine), default=None)
            if watermark != state["watermark"]:
                state["watermark"], state["since"] = watermark, now
            caught_up = bool(mine) and all(s.end_offset - s.next_offset <= 0 for s in mine)
            end = input_ends[topic]
            ended = caught_up and end is not None and end.reached_by(mine)
            idle = ended or (caught_up and now - state["since"] >= idle_close_s)
            until = closed_until(statuses, topic, lateness[topic], idle=idle, ended=ended)
            done = state["closed"]
            if until is None or (done is not None and until < done + 2 * HOUR_MS):
                continue  # not even the hour after the last one closed is due: no listing
            # Every hour from the one after the last closed closes, with or without events:
            # a day is complete, and its report due, only when all 24 hours are. The first
            # time, from the start of the first archived hour's day (or the first partition).
            if done is None:
                archived = hours_with_events(store, topic)
                if not archived:
                    continue  # nothing archived yet: nothing to close
                first = max(archived[0] // DAY_MS * DAY_MS, FIRST_HOUR_MS)
            else:
                first = done + HOUR_MS
            # hours past the partitions' end (a replay's last late or future events) wait
            due = [h for h in range(first, until - HOUR_MS + 1, HOUR_MS) if in_partitions(h)]
            if due and not idle and catching_up(now, watermark, lateness[topic], len(due)):
                context.log.info(
                    "%s: %d archive hour(s) closed while the fleet catches up (a replay or "
                    "a backlog), through %s; held until the stretch ends, to be corrected in "
                    "one run",
                    topic,
                    len(due),
                    partition_key_for(due[-1]),
                )
                continue
            for hour in archive_completeness(store, due, topic):
                events.append(
                    dg.AssetMaterialization(
                        asset_key=RAW_ARCHIVE_KEY,
                        partition=partition_key_for(hour.hour_ms),
                        metadata={
                            **hour_metadata(hour),
                            "closed_by": _closed_by(ended, idle),
                        },
                    )
                )
            if due:
                state["closed"] = due[-1]
                context.log.info(
                    "%s: %d archive hour(s) complete, through %s",
                    topic,
                    len(due),
                    partition_key_for(due[-1]),
                )
        return dg.SensorResult(asset_events=events, cursor=json.dumps(cursor, sort_keys=True))

    return _sensor
