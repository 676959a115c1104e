"""Traffic traces: a (timestamp, value) CSV read as the shape of the input rate over time.

The shipped traces are from the Numenta Anomaly Benchmark (``data/traces``, MIT
licence, see LICENSE-NAB.txt): Twitter mention volumes, an ELB request count and NYC taxi demand.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from pipelines.config import PROJECT_ROOT
from pipelines.exceptions import SluiceError

__all__ = ["TRACES_DIR", "Trace", "TraceError", "load_trace", "resolve_trace"]

TRACES_DIR = PROJECT_ROOT / "data" / "traces"


class TraceError(SluiceError):
    """A trace file is missing or not a usable timestamp,value CSV."""


@dataclass(frozen=True)
class Trace:
    name: str
    times_s: np.ndarray  # seconds since the epoch, ascending
    values: np.ndarray  # >= 0, max > 0

    @property
    def start_s(self) -> float:
        return float(self.times_s[0])

    @property
    def duration_s(self) -> float:
        return float(self.times_s[-1] - self.times_s[0])

    def shape_at(self, t_s: np.ndarray | float) -> np.ndarray:
        """Relative rate in [0, 1] at trace time ``t_s`` (linear between samples)."""
        return np.interp(t_s, self.times_s, self.values) / self.values.max()


def resolve_trace(name_or_path: str | Path) -> Path:
    """A path as given, or the name of a shipped trace (with or without ``.csv``)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    for candidate in (TRACES_DIR / str(name_or_path), TRACES_DIR / f"{name_or_path}.csv"):
        if candidate.exists():
            return candidate
    shipped = ", ".join(sorted(p.stem for p in TRACES_DIR.glob("*.csv")))
    raise TraceError(f"trace {str(name_or_path)!r} not found (shipped traces: {shipped})")


def _parse_time(text: str, where: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(
            f"{where}: timestamp {text!r} is neither ISO 8601 nor epoch seconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def load_trace(name_or_path: str | Path) -> Trace:
    path = resolve_trace(name_or_path)
    times: list[float] = []
    values: list[float] = []
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or [h.strip().lower() for h in header[:2]] != ["timestamp", "value"]:
            raise TraceError(f"{path}: expected a header 'timestamp,value', got {header!r}")
        for line_no, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) < 2:
                raise TraceError(f"{path}:{line_no}: expected timestamp,value, got {row!r}")
            times.append(_parse_time(row[0], f"{path}:{line_no}"))
            try:
                value = float(row[1])
            except ValueError:
                raise TraceError(f"{path}:{line_no}: value {row[1]!r} is not a number") from None
            if value < 0 or not np.isfinite(value):
                raise TraceError(f"{path}:{line_no}: value {value} must be finite and >= 0")
            values.append(value)
    if len(times) < 2:
        raise TraceError(f"{path}: needs at least two samples, has {len(times)}")
    t = np.array(times)
    v = np.array(values)
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if v.max() <= 0:
        raise TraceError(f"{path}: every value is 0; a trace needs some traffic")
    return Trace(path.stem, t, v)
