"""A task's count of the values that did not fit their declared type, per field and reason:
the messages dead-lettered for one (``missing_field``, ``wrong_type``, ``out_of_range``) and,
under ``on_type_error: null``, the values made null. Kept in the task's checkpoint and its
status (the control store's ``views`` JSON), where `sluice status` reads it.

As JSON: ``{"dead_lettered": {field: {reason: n}}, "nulled": {field: {reason: n}}}``, an
outcome present only when it counted something.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pipelines.events.decode import DecodedBatch

__all__ = ["DEAD_LETTERED", "NULLED", "OUTCOMES", "TypeErrors"]

DEAD_LETTERED = "dead_lettered"
NULLED = "nulled"
OUTCOMES = (DEAD_LETTERED, NULLED)


class TypeErrors:
    """Counts per outcome of (field, reason)."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[tuple[str, str]]] = {o: Counter() for o in OUTCOMES}

    def add(self, batch: DecodedBatch) -> None:
        """Count a decoded batch's dead letters that name a field, and its nulled values."""
        dead = self.counts[DEAD_LETTERED]
        for letter in batch.dead_letters:
            if letter.field is not None:
                dead[(letter.field, letter.reason)] += 1
        if batch.nulled:
            self.counts[NULLED].update(batch.nulled)

    def as_json(self) -> dict[str, dict[str, dict[str, int]]]:
        out: dict[str, dict[str, dict[str, int]]] = {}
        for outcome, counts in self.counts.items():
            for (name, reason), n in sorted(counts.items()):
                if n:
                    out.setdefault(outcome, {}).setdefault(name, {})[reason] = n
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> TypeErrors:
        """Counts as :meth:`as_json` wrote them (None or {}: none)."""
        found = cls()
        for outcome, fields in (data or {}).items():
            if outcome in found.counts:
                for name, reasons in fields.items():
                    for reason, n in reasons.items():
                        found.counts[outcome][(name, reason)] += int(n)
        return found

    def __add__(self, other: TypeErrors) -> TypeErrors:
        total = TypeErrors()
        for outcome in OUTCOMES:
            total.counts[outcome] = self.counts[outcome] + other.counts[outcome]
        return total
