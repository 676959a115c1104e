"""What a task needs of a view's state, whatever the kind of view: a windowed view's open
windows (:class:`~pipelines.stream.state.WindowState`) or a session view's sessions
(:class:`~pipelines.stream.sessions.SessionState`). The task drives both through this one
protocol, so it never asks which kind it holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import pyarrow as pa

from pipelines.events.decode import DecodedBatch
from pipelines.stream.sessions import SessionState
from pipelines.stream.state import WindowState
from pipelines.views.model import SESSION, WINDOW, View

__all__ = ["STATES", "ViewState", "view_state"]


class ViewState(Protocol):
    view: View
    buckets: dict[int, Any]
    """Per segment (hour) start: what memory holds of it."""
    dirty: set[int]
    """Segments changed since the last flush."""
    processed: int
    late: int

    def update(self, batch: DecodedBatch) -> None:
        """Fold a decoded batch in (late events counted, not folded)."""

    def settle(self, watermark: int) -> None:
        """What the watermark makes final is folded in (sessions; windows fold at once)."""

    def segment_table(
        self, segment: int, current: Callable[[], pa.Table | None] | None = None
    ) -> pa.Table:
        """The segment's realtime file as it should be now; ``current`` reads the file as the
        last flush wrote it, for state that keeps part of its rows only there."""

    def flushed(self, checkpoint: bool = False) -> None:
        """The dirty segments' files are written (for a ``checkpoint``: its state follows)."""

    def closed_segments(self, watermark: int) -> list[int]:
        """Segments no in-time event can change any more."""

    def evict(self, segments: Iterable[int]) -> None:
        """Forget segments whose final state is in their files."""

    def all_table(self) -> pa.Table:
        """Everything memory holds, for a checkpoint."""

    def pending_table(self) -> pa.Table | None:
        """Events accepted but not folded in yet, for a checkpoint (None: there are none)."""

    def load(self, table: pa.Table, pending: pa.Table | None = None) -> None:
        """Restore from a checkpoint's tables."""


STATES: dict[str, Callable[[View], ViewState]] = {WINDOW: WindowState, SESSION: SessionState}
"""Every kind's stream state, by the kind's name (:data:`pipelines.kinds.KINDS`)."""


def view_state(view: View) -> ViewState:
    """The per-task state a view needs: open windows, or open sessions (its kind's)."""
    return STATES[view.kind](view)
