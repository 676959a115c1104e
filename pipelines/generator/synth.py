"""Synthetic events shaped by a trace, with the faults a real stream has, deterministic per seed.

The schedule lives in simulated (event) time, cut into fixed steps, so the messages and their
order depend only on the seed and the knobs, never on how fast the machine replays them.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import orjson

from pipelines.generator.events import EVENT_TYPES
from pipelines.generator.trace import Trace

__all__ = ["MALFORMED_KINDS", "GeneratorOptions", "GeneratorReport", "Message", "synthesize"]

MALFORMED_KINDS = (
    "malformed_json",
    "not_an_object",
    "missing_field",
    "wrong_type",
    "out_of_range",
    "oversize",
    "future_event_time",
)
"""What the generator breaks on purpose; each is one of the decoder's dead-letter reasons."""


@dataclass(frozen=True)
class GeneratorOptions:
    seed: int = 7
    peak_rate: float = 2000.0
    """Messages per wall-clock second at the trace's maximum."""
    speedup: float = 360.0
    """Simulated seconds per wall-clock second (360: a day in four minutes)."""
    step_s: float = 1.0
    """Simulated seconds per scheduling step."""
    max_events: int | None = None
    duration_s: float | None = None
    """Simulated seconds to replay; default the whole trace."""
    late_share: float = 0.02
    late_delay_mean_s: float = 120.0
    """Mean of the exponential delay (event time) of late events."""
    duplicate_share: float = 0.01
    malformed_share: float = 0.005
    orgs: int = 40
    clients_per_org: int = 50
    key_skew: float = 1.1
    """Zipf exponent over organisations; 0 is uniform."""
    key_field: str = "org"
    oversize_bytes: int = 100 * 1024
    future_offset_s: float = 30 * 86400.0
    warmup_events: int = 2000
    """No malformed message before this many, so every partition has a watermark first."""

    def validate(self) -> None:
        from pipelines.exceptions import ConfigError

        for name in ("late_share", "duplicate_share", "malformed_share"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ConfigError(f"{name} must be in [0, 1), got {value}")
        if self.late_share + self.duplicate_share + self.malformed_share >= 1:
            raise ConfigError("late + duplicate + malformed shares must stay below 1")
        for name in ("peak_rate", "speedup", "step_s", "late_delay_mean_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.orgs < 1 or self.clients_per_org < 1:
            raise ConfigError("orgs and clients_per_org must be >= 1")
        if self.key_skew < 0:
            raise ConfigError(f"key_skew must be >= 0, got {self.key_skew}")
        if self.key_field not in ("org", "client", "session_id", "event_id", "event_type"):
            raise ConfigError(f"key_field {self.key_field!r} is not a string event field")


@dataclass
class GeneratorReport:
    """What was produced; the counts a test or a user checks the stream against."""

    produced: int = 0
    valid: int = 0
    late: int = 0
    duplicates: int = 0
    malformed: Counter = field(default_factory=Counter)
    first_event_time_ms: int | None = None
    last_event_time_ms: int | None = None
    wall_s: float = 0.0

    @property
    def malformed_total(self) -> int:
        return sum(self.malformed.values())

    def as_dict(self) -> dict:
        return {
            "produced": self.produced,
            "valid": self.valid,
            "late": self.late,
            "duplicates": self.duplicates,
            "malformed": self.malformed_total,
            "malformed_by_kind": dict(sorted(self.malformed.items())),
            "first_event_time_ms": self.first_event_time_ms,
            "last_event_time_ms": self.last_event_time_ms,
            "wall_s": round(self.wall_s, 3),
            "rate_per_s": round(self.produced / self.wall_s, 1) if self.wall_s else None,
        }


class Message(NamedTuple):
    """One message to produce (a tuple: cheaper to build, once per message, than a frozen
    dataclass)."""

    key: bytes
    value: bytes
    kind: str  # "valid", "late", "duplicate" or a malformed kind
    sim_time_s: float
    event_time_ms: int | None


def _zipf_weights(n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** s
    return weights / weights.sum()


def synthesize(trace: Trace, options: GeneratorOptions) -> Iterator[Message]:
    """Messages in production order; the caller paces them by ``sim_time_s``."""
    options.validate()
    rng = np.random.default_rng(options.seed)
    org_p = _zipf_weights(options.orgs, options.key_skew)
    type_p = np.array([0.55, 0.2, 0.12, 0.08, 0.05])
    recent: deque[tuple[bytes, bytes]] = deque(maxlen=1000)
    end_s = (
        trace.duration_s
        if options.duration_s is None
        else min(options.duration_s, trace.duration_s)
    )
    per_step = options.peak_rate * options.step_s / options.speedup
    emitted = 0
    serial = 0
    start_s = trace.start_s
    seed_hex = f"{options.seed:x}"
    max_events = options.max_events
    key_field = options.key_field
    duplicate_share, late_share = options.duplicate_share, options.late_share
    malformed_share = options.malformed_share
    dumps = orjson.dumps
    org_names = [f"org-{o:03d}" for o in range(options.orgs)]
    client_names = [
        [f"{org}-client-{c:04d}" for c in range(options.clients_per_org)] for org in org_names
    ]
    session_names = [[f"{org}-s-{s:05d}" for s in range(200)] for org in org_names]
    expected_so_far = 0.0  # running sum of expected messages, so fractions carry over
    # Blocks of about 50k messages at peak rate: big enough to vectorize, small enough not
    # to draw far more than max_events.
    block_s = options.step_s * max(1.0, min(3600.0, 50_000 / per_step))
    block_start = 0.0
    while block_start < end_s:
        # One block of simulated time at a time, its messages drawn in one go.
        steps = np.arange(block_start, min(block_start + block_s, end_s), options.step_s)
        block_start += block_s
        expected = per_step * trace.shape_at(trace.start_s + steps)
        cumulative = expected_so_far + np.cumsum(expected)
        counts = np.diff(np.floor(np.concatenate([[expected_so_far], cumulative]))).astype(np.int64)
        expected_so_far = float(cumulative[-1])
        n = int(counts.sum())
        if n == 0:
            continue
        step_index = np.repeat(np.arange(len(steps)), counts)
        jitter = rng.random(n)
        jitter = jitter[np.lexsort((jitter, step_index))]
        offsets = steps[step_index] + jitter * options.step_s
        orgs = rng.choice(options.orgs, size=n, p=org_p)
        clients = rng.integers(0, options.clients_per_org, size=n)
        sessions = rng.integers(0, 200, size=n)
        types = rng.choice(len(EVENT_TYPES), size=n, p=type_p)
        sizes = rng.lognormal(mean=8.0, sigma=1.5, size=n).astype(np.int64)
        roll = rng.random(n)
        delays = rng.exponential(options.late_delay_mean_s, size=n)
        kinds = rng.integers(0, len(MALFORMED_KINDS), size=n)
        # Python scalars and ready-made strings: indexing numpy arrays and formatting names
        # per message cost more than the rest of the loop.
        for sim_s, org_i, client_i, session_i, type_i, size, r, delay, kind_i in zip(
            offsets.tolist(),
            orgs.tolist(),
            clients.tolist(),
            sessions.tolist(),
            types.tolist(),
            sizes.tolist(),
            roll.tolist(),
            delays.tolist(),
            kinds.tolist(),
            strict=True,
        ):
            event_ms = int((start_s + sim_s) * 1000)
            kind = "valid"
            if r < duplicate_share and recent:
                key, value = recent[int(r * 1e9) % len(recent)]
                yield Message(key, value, "duplicate", sim_s, None)
                emitted += 1
                if max_events and emitted >= max_events:
                    return
                continue
            r -= duplicate_share
            if 0 <= r < late_share:
                kind = "late"
                event_ms -= int(delay * 1000) + 1
            r -= late_share
            org = org_names[org_i]
            serial += 1
            event = {
                "event_id": f"{seed_hex}-{serial:012x}",
                "event_time": event_ms,
                "org": org,
                "client": client_names[org_i][client_i],
                "bytes_tx": size,
                "session_id": session_names[org_i][session_i],
                "event_type": EVENT_TYPES[type_i],
            }
            key = event[key_field].encode()
            if 0 <= r < malformed_share and emitted >= options.warmup_events:
                kind = MALFORMED_KINDS[kind_i]
                yield Message(key, _break(event, kind, options), kind, sim_s, None)
            else:
                value = dumps(event)
                recent.append((key, value))
                yield Message(key, value, kind, sim_s, event_ms)
            emitted += 1
            if max_events and emitted >= max_events:
                return


def _break(event: dict, kind: str, options: GeneratorOptions) -> bytes:
    if kind == "malformed_json":
        return orjson.dumps(event)[:-7]
    if kind == "not_an_object":
        return orjson.dumps([event["event_id"], event["event_time"]])
    if kind == "missing_field":
        return orjson.dumps({k: v for k, v in event.items() if k != "bytes_tx"})
    if kind == "wrong_type":
        return orjson.dumps({**event, "bytes_tx": str(event["bytes_tx"])})
    if kind == "out_of_range":
        return orjson.dumps({**event, "bytes_tx": -1 - event["bytes_tx"]})
    if kind == "oversize":
        return orjson.dumps({**event, "padding": "x" * options.oversize_bytes})
    if kind == "future_event_time":
        return orjson.dumps(
            {**event, "event_time": event["event_time"] + int(options.future_offset_s * 1000)}
        )
    raise ValueError(kind)
