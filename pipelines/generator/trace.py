"""Traffic traces: a (timestamp, value) CSV read as the shape of the input rate over time.

The one loader, used by the generator (the shape of what it produces) and the autoscaling
simulator (the rate it replays). Timestamps are epoch seconds or ISO 8601; an ISO timestamp
without a zone is UTC, never the machine's local time, so a trace replays the same on every
machine and a daylight-saving change does not shift a day of traffic.

The shipped traces are from the Numenta Anomaly Benchmark (``data/traces``, MIT
licence, see LICENSE-NAB.txt): Twitter mention volumes, an ELB request count and NYC taxi demand.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from pipelines.config import PROJECT_ROOT
from pipelines.exceptions import SluiceError

__all__ = [
    "TRACES_DIR",
    "InvalidTraceParameter",
    "Trace",
    "TraceError",
    "TraceFormatError",
    "TraceNotFound",
    "load_trace",
    "resolve_trace",
    "shipped_traces",
]

TRACES_DIR = PROJECT_ROOT / "data" / "traces"
HEADER_NAMES = frozenset({"timestamp", "time", "ts"})


class TraceError(SluiceError):
    """A trace is missing, malformed, or asked for something it cannot give."""


class TraceNotFound(TraceError):
    """The trace file (or shipped trace name) does not exist."""


class TraceFormatError(TraceError):
    """The trace is not a `timestamp,value` CSV with increasing times and finite values >= 0."""


class InvalidTraceParameter(TraceError):
    """A peak rate or a number of days to cut a trace to is out of range."""


@dataclass(frozen=True)
class Trace:
    """A traffic trace: epoch seconds, ascending, and the value at each (after `scaled`: msg/s)."""

    name: str
    times_s: np.ndarray
    values: np.ndarray

    @property
    def start_s(self) -> float:
        return float(self.times_s[0])

    @property
    def duration_s(self) -> float:
        return float(self.times_s[-1] - self.times_s[0])

    def shape_at(self, t_s: np.ndarray | float) -> np.ndarray:
        """Relative rate in [0, 1] at trace time ``t_s`` (linear between samples)."""
        return np.interp(t_s, self.times_s, self.values) / self.values.max()

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        """Linearly interpolated value at ``t`` seconds since the start."""
        return np.interp(t, self.times_s - self.times_s[0], self.values)

    def scaled(self, peak_rate: float) -> Trace:
        """Values scaled so the maximum is ``peak_rate`` msg/s."""
        if not (peak_rate > 0 and math.isfinite(peak_rate)):
            raise InvalidTraceParameter(f"peak rate must be a positive number, got {peak_rate}")
        top = float(self.values.max())
        if top <= 0:
            raise TraceFormatError(f"trace {self.name!r} has no positive value to scale")
        return Trace(self.name, self.times_s, self.values * (peak_rate / top))

    def cut(self, days: float | None) -> Trace:
        """The first ``days`` days (all of it if None)."""
        if days is None:
            return self
        if not (days > 0 and math.isfinite(days)):
            raise InvalidTraceParameter(f"days must be positive, got {days}")
        keep = self.times_s <= self.times_s[0] + days * 86400.0
        if keep.sum() < 2:
            raise InvalidTraceParameter(
                f"{days} days of trace {self.name!r} hold fewer than 2 points"
            )
        return Trace(self.name, self.times_s[keep], self.values[keep])


def shipped_traces() -> list[Path]:
    """The traces shipped with the project."""
    return sorted(TRACES_DIR.glob("*.csv"))


def resolve_trace(name_or_path: str | Path) -> Path:
    """A path as given, or the name of a shipped trace (with or without ``.csv``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    for candidate in (TRACES_DIR / f"{name_or_path}.csv", TRACES_DIR / str(name_or_path)):
        if candidate.is_file():
            return candidate
    shipped = ", ".join(p.stem for p in shipped_traces())
    raise TraceNotFound(f"trace {str(name_or_path)!r} not found (shipped traces: {shipped})")


def parse_timestamp(text: str) -> float:
    """Epoch seconds of ``text``: epoch seconds, or ISO 8601 (no zone = UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def load_trace(name_or_path: str | Path) -> Trace:
    """Read a ``timestamp,value`` CSV (header optional): strictly increasing times, values
    finite and >= 0, at least two rows."""
    path = resolve_trace(name_or_path)
    times: list[float] = []
    values: list[float] = []
    try:
        with path.open(newline="") as handle:
            for line_no, row in enumerate(csv.reader(handle), start=1):
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) < 2:
                    raise TraceFormatError(f"{path}:{line_no}: expected timestamp,value, got {row}")
                stamp, raw = row[0].strip(), row[1].strip()
                if line_no == 1 and stamp.lower() in HEADER_NAMES:
                    continue
                try:
                    t = parse_timestamp(stamp)
                except ValueError:
                    raise TraceFormatError(f"{path}:{line_no}: bad timestamp {stamp!r}") from None
                try:
                    value = float(raw)
                except ValueError:
                    raise TraceFormatError(f"{path}:{line_no}: bad value {raw!r}") from None
                if not math.isfinite(value) or value < 0:
                    raise TraceFormatError(
                        f"{path}:{line_no}: value must be finite and >= 0, got {raw!r}"
                    )
                if times and t <= times[-1]:
                    raise TraceFormatError(
                        f"{path}:{line_no}: timestamp {stamp!r} does not increase"
                    )
                times.append(t)
                values.append(value)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"cannot read trace {path}: {exc}") from exc
    if len(times) < 2:
        raise TraceFormatError(f"{path}: needs at least 2 rows, got {len(times)}")
    return Trace(path.stem, np.array(times), np.array(values))
