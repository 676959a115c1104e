"""The fleet's realtime publisher, run by whoever holds the coordinator lease.

One publisher per fleet: the leader's control tick starts a pass of
:class:`pipelines.serving.publisher.RealtimePublisher` in a thread of its own when
``SLUICE_PUBLISH_INTERVAL_S`` has passed since the last one, so a slow commit never delays a
heartbeat. A leader that loses the lease starts no more passes; a pass under way asks the
control store before each commit and commits nothing once another agent leads (its records stay
for the new leader).
A leader that stops gracefully runs one last pass after its tasks' final flush (:meth:`final`),
so what they flushed does not wait for the next leader. So does an agent that did not lead but
finds no live leader when it stops (the fleet's last agent, or one whose final flush came after
a stopping leader's last pass): it takes the lease for that pass
(:meth:`orchestration.control_plane.fleet.agent.Agent.lead_the_last_pass`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pipelines.config import SluiceSettings
from pipelines.storage import ObjectStore
from pipelines.views import View

if TYPE_CHECKING:  # the publisher (pyiceberg) loads on the leader's first pass only
    from pipelines.serving.publisher import PublishPass, RealtimePublisher
    from pipelines.tables import ViewTables

__all__ = ["PublisherRunner"]

log = logging.getLogger(__name__)


class PublisherRunner:
    def __init__(
        self,
        store: ObjectStore,
        tables: Callable[[], ViewTables],
        views: Callable[[], Sequence[View]],
        settings: SluiceSettings,
        leading: Callable[[], bool] | None = None,
    ) -> None:

        def open_publisher() -> RealtimePublisher:
            from pipelines.serving.publisher import RealtimePublisher

            return RealtimePublisher.from_settings(
                store, tables(), views, settings, leading=leading, term=lambda: self.term
            )

        self._open = open_publisher
        self.publisher: RealtimePublisher | None = None
        self.thread: threading.Thread | None = None
        self.last: PublishPass | None = None
        self.leading = False
        """Whether the last tick held the coordinator lease."""
        self.term: int | None = None
        """The lease term of the last tick that held it: the publisher's commits carry it."""

    def tick(self, leader: int | None) -> None:
        """Start a pass if this agent leads, none is running and one is due (the first pass
        also opens the publisher, in its thread: importing pyiceberg and opening the tables
        takes seconds, which in the heartbeat's thread can cost a new leader its lease)."""
        self.leading = bool(leader)
        if leader:
            self.term = int(leader)
        if not leader or (self.thread is not None and self.thread.is_alive()):
            return
        if self.publisher is not None and not self.publisher.due():
            return
        self.thread = threading.Thread(target=self._run, name="realtime-publisher", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.publisher is None:
            try:
                self.publisher = self._open()
            except Exception:
                log.exception("the realtime publisher cannot open the tables; retried next tick")
                return
        try:
            self.last = self.publisher.publish_once()
        except Exception:
            log.exception("a realtime publish pass failed; retried at the next interval")

    def join(self, timeout_s: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout_s)

    def final(
        self, timeout_s: float, take_over: Callable[[float], int | None] | None = None
    ) -> None:
        """A graceful stop's last pass, once the worker's tasks flushed: wait for a pass under
        way, then run one more if this agent led, or if ``take_over(until)`` (asked of an
        agent that did not lead; it may wait until half the time left, the pass needs the
        rest) gives the term of the lease it took from no live leader; all within
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self.join(timeout_s)
        if self.thread is not None and self.thread.is_alive():
            return
        if not self.leading:
            now = time.monotonic()
            term = take_over(now + (deadline - now) / 2) if take_over is not None else None
            if not term:
                return
            self.term = term
        self.thread = threading.Thread(target=self._run, name="realtime-publisher", daemon=True)
        self.thread.start()
        self.thread.join(max(0.0, deadline - time.monotonic()))
