"""Wait until wall time catches up with an event's time at a speedup: how replays pace."""

from __future__ import annotations

import time

__all__ = ["wait_until_due"]


def wait_until_due(started: float, sim_s: float, speedup: float) -> None:
    """Sleep until ``started`` (a ``time.monotonic()``) + ``sim_s / speedup``; sleeps under
    2 ms are skipped (the sleep's own overhead)."""
    delay = started + sim_s / speedup - time.monotonic()
    if delay > 0.002:
        time.sleep(delay)
