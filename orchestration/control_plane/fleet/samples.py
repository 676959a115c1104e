"""Fleet samples: the supervisor's lag view, kept over time so a report can draw a day of it.

The supervisor loops of `sluice up` and `sluice stream` call :meth:`FleetSampler.maybe_record`
every pass; one sample per topic is written every ``SLUICE_FLEET_SAMPLE_INTERVAL_S`` (10 s)
and samples older than ``SLUICE_FLEET_SAMPLE_RETENTION_DAYS`` (14) are pruned as it writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy.exc import SQLAlchemyError

from orchestration.control_plane.lag import ProducedProbe, TaskLag, collect_task_lags
from orchestration.control_plane.runtime import Runtime
from pipelines.control import FleetSample

__all__ = ["FleetSampler", "summarize"]

log = logging.getLogger(__name__)

DAY_S = 86_400.0


def summarize(lags: Sequence[TaskLag], topic: str, now: float) -> FleetSample | None:
    """One sample of ``topic`` from the live (not stale) tasks; None when none reports."""
    live = [lag for lag in lags if lag.status.topic == topic and not lag.stale]
    if not live:
        return None
    time_lags = [lag.time_lag_s for lag in live if lag.time_lag_s is not None]
    watermarks = [lag.status.watermark for lag in live if lag.status.watermark is not None]
    return FleetSample(
        sampled_at=now,
        topic=topic,
        workers=len({lag.status.worker_id for lag in live}),
        tasks=len(live),
        backlog=sum(lag.backlog for lag in live),
        max_time_lag_s=max(time_lags) if time_lags else None,
        # a task without a watermark has accepted nothing yet: the fleet has not started
        min_watermark_ms=int(min(watermarks)) if len(watermarks) == len(live) else None,
        consumed=sum(lag.status.consumed for lag in live),
    )


class FleetSampler:
    """Records one :class:`FleetSample` per topic every interval; cheap to call every pass."""

    def __init__(
        self,
        runtime: Runtime,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.time,
        probe: ProducedProbe | None = None,
    ) -> None:
        settings = runtime.settings
        self.runtime = runtime
        self.probe = probe
        self.interval_s = settings.fleet_sample_interval_s if interval_s is None else interval_s
        self.retain_s = settings.fleet_sample_retention_days * DAY_S
        self.clock = clock
        self.next_at = 0.0

    def maybe_record(self, lags: Sequence[TaskLag] | None = None) -> list[FleetSample]:
        """If the interval has passed, sample every topic of ``lags`` (collected here if None).

        A control store that cannot be written is logged and retried next interval: the
        samples feed a report, never the fleet.
        """
        now = self.clock()
        if now < self.next_at:
            return []
        self.next_at = now + self.interval_s
        if lags is None:
            lags = collect_task_lags(self.runtime, probe=self.probe)
        samples = [
            sample
            for topic in sorted({lag.status.topic for lag in lags})
            if (sample := summarize(lags, topic, now)) is not None
        ]
        try:
            for sample in samples:
                self.runtime.control.record_fleet_sample(sample, retain_s=self.retain_s)
        except SQLAlchemyError as exc:
            log.warning("cannot record fleet samples: %s", exc)
            return []
        return samples
