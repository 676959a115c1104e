"""The reconciliation compares integers exactly and doubles within its stated relative
tolerance (Spark adds doubles in another order than the stream)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from quality.reconcile.metrics import DOUBLE_RELATIVE_TOLERANCE, close
from quality.reconcile.sessions import _differing


def test_integers_are_compared_exactly_even_where_a_double_would_round() -> None:
    big = 2**53
    assert not close(big, big + 1)  # as doubles both are 2**53
    assert not close(10**12, 10**12 + 1)
    assert close(10**12, 10**12)


def test_doubles_are_the_same_within_the_relative_tolerance_and_no_further() -> None:
    values = np.random.default_rng(4).uniform(-1e6, 1e6, 5000)
    forward, backward = math.fsum(values), float(np.sum(values[::-1]))
    assert close(forward, backward)  # another order of addition
    exact = 12345.678
    assert close(exact, exact * (1 + DOUBLE_RELATIVE_TOLERANCE / 2))
    assert not close(exact, exact * (1 + DOUBLE_RELATIVE_TOLERANCE * 2))


def test_sessions_compare_columns_by_the_same_rule() -> None:
    e = pa.array([2**53, 5, 7], pa.int64())
    a = pa.array([2**53 + 1, 5, 7], pa.int64())
    assert _differing(e, a).tolist() == [0]
    x = pa.array([1000.0, 2.0])
    y = pa.array([1000.0 * (1 + DOUBLE_RELATIVE_TOLERANCE / 2), 2.0 + 1e-6])
    assert _differing(x, y).tolist() == [1]
