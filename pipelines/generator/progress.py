"""A replay's progress as a small JSON file, so another process (`sluice up`) can show it.

Written atomically (temporary file, then rename): a reader sees the previous record or the
next one, never half of one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["ReplayProgress"]


@dataclass(frozen=True)
class ReplayProgress:
    produced: int
    rate: float
    """Messages per wall second so far."""
    sim_s: float
    """Simulated seconds replayed."""
    total_sim_s: float
    speedup: float | None
    """Simulated seconds per wall second; None when the replay is not paced."""
    done: bool = False

    @property
    def eta_s(self) -> float | None:
        """Wall seconds left, for a paced replay."""
        if self.done:
            return 0.0
        if not self.speedup:
            return None
        return max(0.0, (self.total_sim_s - self.sim_s) / self.speedup)

    def write(self, path: Path) -> None:
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(asdict(self)))
        os.replace(partial, path)

    @classmethod
    def read(cls, path: Path) -> ReplayProgress | None:
        """The last record, or None before the first (or if the file is unreadable)."""
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
