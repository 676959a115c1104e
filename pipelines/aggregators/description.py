"""What an aggregation says about itself, for quality and reconciliation to read.

Each aggregation class carries one :class:`Description`: where its output values lie, what
it measures, how its stream values are held to the correction's, and whether Spark builds
its state. Checks derive their rules from it instead of keeping lists of aggregation names,
so an aggregation registered later (``SLUICE_AGGREGATOR_MODULES``) is checked like a built-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Description", "Measure", "Range", "Reconciled"]


class Range(StrEnum):
    """Where an output's numeric values lie (text outputs are non-empty whatever this says)."""

    NON_NEGATIVE = "non-negative"
    """Counts, bin counts, variances: >= 0 whatever the input."""
    UNIT_INTERVAL = "in [0, 1]"
    """Shares of the group's values."""
    OF_INPUT = "within the input's range"
    """One of the input's values, or a value between two of them (min, mean, quantiles,
    first, mode, ...): it keeps every range rule of its input column."""
    SIGN_OF_INPUT = "non-negative where every input is"
    """Sums and ratios of sums: >= 0 when each input column is, else any sign."""
    ANY = "any"


class Measure(StrEnum):
    """What the output counts, if anything: quality compares counts with distinct counts."""

    COUNT = "count"
    """Events of the group (those its own ``where:`` keeps)."""
    DISTINCT = "exact distinct count"
    ESTIMATE = "distinct count estimate"
    ESTIMATE_WITH_BOUNDS = "distinct count estimate with bounds"
    """The estimate in the first output column, its lower and upper bound beside it."""
    VALUE = "value"
    """A statistic, a picked value, a distribution or a ranking: no count."""

    @property
    def distinct(self) -> bool:
        """A number of distinct values, exact or estimated: at most the group's events."""
        return self in (Measure.DISTINCT, Measure.ESTIMATE, Measure.ESTIMATE_WITH_BOUNDS)


class Reconciled(StrEnum):
    """How the stream's value is held to the correction's (its exact value, or Spark's own
    sketch of the window)."""

    EVENT_COUNT = "realtime = exact + duplicates - late drops"
    """Every delivery counted: the difference is exactly the window's causes."""
    EXACT = "exact"
    """Equal, unless the group had duplicate or late events."""
    REPRODUCED_SKETCH = "reproduced sketch"
    """Spark builds the same sketch (HLL, theta): its estimate equals the stream's where no
    event was late; the estimate is in the first output column."""
    QUANTILE_RANK = "quantile rank error"
    """KLL quantiles: the realtime value's rank among the window's exact values."""
    SHARE_RANK = "share rank error"
    """KLL CDF: the difference of the shares."""
    BIN_RANK = "bin rank error"
    """KLL histogram: the difference of a bin's counts over the window's size."""
    FREQUENCY_BOUNDS = "frequency bounds"
    """Frequent items: each exact count within the realtime [lower, upper]."""
    REPORTED = "reported"
    """Rankings without bounds: compared and reported, never failing."""

    @property
    def exact(self) -> bool:
        """Whether the correction computes the very value the stream does."""
        return self in (Reconciled.EVENT_COUNT, Reconciled.EXACT)

    @property
    def rank_error(self) -> bool:
        """A KLL sketch, held to its normalized rank error."""
        return self in (Reconciled.QUANTILE_RANK, Reconciled.SHARE_RANK, Reconciled.BIN_RANK)

    @property
    def informational(self) -> bool:
        """Rankings: no relative error is meaningful for them."""
        return self in (Reconciled.FREQUENCY_BOUNDS, Reconciled.REPORTED)


@dataclass(frozen=True)
class Description:
    """What quality and reconciliation need to know about one aggregation's output."""

    range: Range
    measure: Measure = Measure.VALUE
    reconciled: Reconciled = Reconciled.EXACT
    spark_state: bool = True
    """Whether the correction's Spark job builds the stream's state (else it stores null)."""

    def __post_init__(self) -> None:
        if self.reconciled is Reconciled.REPRODUCED_SKETCH and not self.spark_state:
            raise ValueError("a reproduced sketch needs the state Spark builds")
