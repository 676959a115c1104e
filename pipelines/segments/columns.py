"""Column names of realtime segment files that are not a view's own outputs."""

from __future__ import annotations

__all__ = ["STATE_SUFFIX", "is_state_column", "state_column"]

STATE_SUFFIX = "__state"
"""A realtime file stores each aggregation's serialized partial state, not its result: the
query merges the partials of every task before finalizing them."""


def state_column(out: str) -> str:
    """The column holding the partial state of the aggregation whose output is ``out``."""
    return f"{out}{STATE_SUFFIX}"


def is_state_column(name: str) -> bool:
    return name.endswith(STATE_SUFFIX)
