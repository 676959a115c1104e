"""Replay synthesized events onto a topic, paced so simulated time runs ``speedup`` times faster."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipelines.generator.pacing import wait_until_due
from pipelines.generator.synth import GeneratorOptions, GeneratorReport, Message, synthesize
from pipelines.generator.trace import Trace

__all__ = ["replay"]


def replay(
    trace: Trace,
    options: GeneratorOptions,
    send: Callable[[Message], None],
    *,
    pace: bool = True,
    stop: Callable[[], bool] | None = None,
    progress: Callable[[GeneratorReport, float], None] | None = None,
    progress_every_s: float = 1.0,
) -> GeneratorReport:
    """Send every message; with ``pace``, wait until wall time catches up with simulated time."""
    report = GeneratorReport()
    started = time.monotonic()
    next_progress = started + progress_every_s
    for message in synthesize(trace, options):
        if pace:
            wait_until_due(started, message.sim_time_s, options.speedup)
        send(message)
        report.produced += 1
        if message.kind == "duplicate":
            report.duplicates += 1
        elif message.event_time_ms is None:
            report.malformed[message.kind] += 1
        else:
            report.valid += 1
            if message.kind == "late":
                report.late += 1
            t = message.event_time_ms
            if report.first_event_time_ms is None or t < report.first_event_time_ms:
                report.first_event_time_ms = t
            if report.last_event_time_ms is None or t > report.last_event_time_ms:
                report.last_event_time_ms = t
        if report.produced % 1024 == 0:
            now = time.monotonic()
            if progress is not None and now >= next_progress:
                report.wall_s = now - started
                progress(report, message.sim_time_s)
                next_progress = now + progress_every_s
            if stop is not None and stop():
                break
    report.wall_s = time.monotonic() - started
    return report
