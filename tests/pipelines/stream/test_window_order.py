"""The windowed views' one sort per batch: rows by (group code, event time), stable, exactly
as numpy's lexsort orders them, whatever the codes and the span of times."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.events.declaration import EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS
from pipelines.stream.state import code_time_order

_TIMES = st.integers(EVENT_TIME_MIN_MS, EVENT_TIME_MAX_MS - 1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**20), _TIMES), max_size=300),
    st.sampled_from([1, 7, 1_000_000, None]),
)
def test_the_combined_key_sort_orders_rows_as_lexsort(rows, narrow):
    """Ties (same code and time) keep their order; wide spans and many codes take lexsort."""
    codes = np.array([c for c, _ in rows], dtype=np.int64)
    times = np.array([t for _, t in rows], dtype=np.int64)
    if narrow is not None and len(rows):  # the usual batch: a few groups, minutes of times
        codes %= narrow
        times = times[0] + times % 600_000
    expected = np.lexsort((times, codes))
    assert np.array_equal(code_time_order(codes, times), expected)


def test_codes_of_a_real_batch_and_ties():
    codes = np.array([2, 0, 2, 1, 0, 2, 0], dtype=np.intp)
    times = np.array([5, 9, 5, 1, 9, 3, 2], dtype=np.int64) + 1_500_000_000_000
    assert code_time_order(codes, times).tolist() == [6, 1, 4, 3, 5, 0, 2]
