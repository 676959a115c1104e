"""SessionCauses counts a span's causes with cumulative sums; this holds it to its definition:
walk the key's deliveries in time order (then id, or partition and offset), flag repeats of a
declared id (a null id repeats nothing; without an id nothing is a repeat) and late drops."""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.views import load_views
from quality.causes import GroupCauses
from quality.reconcile import SessionCauses

SESSIONS = next(
    v
    for v in load_views(Path(__file__).resolve().parents[2] / "data" / "views.yaml")
    if v.is_session
)
ID = SESSIONS.declaration.id
WITHOUT_ID = dataclasses.replace(
    SESSIONS, declaration=SESSIONS.declaration.model_copy(update={"id": None})
)


def defined_causes(view, rows: pa.Table, key, start_ms: int, end_ms: int) -> GroupCauses:
    """The causes of one span, by the definition, row by row."""
    gap, lateness, key_col = view.session.gap_ms, view.allowed_lateness_ms, view.session.key
    id = view.declaration.id
    seen: set = set()
    events: dict = defaultdict(list)

    def order(row: dict) -> tuple:
        ident = () if id is None else (row[id] is None, row[id] or "")  # nulls last
        return (row["event_time"], *ident, row["partition"], row["offset"])

    for row in sorted(rows.to_pylist(), key=order):
        ident = None if id is None else row[id]
        duplicate = ident is not None and ident in seen
        seen.add(ident)
        prior = row["prior_watermark"]
        late = prior is not None and row["event_time"] < prior - lateness
        events[row[key_col]].append((row["event_time"], duplicate, late))
    mine = events.get(key)
    if not mine:
        return GroupCauses(0, 0, 0)
    times = [t for t, _, _ in mine]
    lo = bisect.bisect_left(times, start_ms - gap)
    hi = bisect.bisect_right(times, end_ms + gap)
    if lo < len(times):  # back to the start of the key's run without a pause of gap
        while lo > 0 and times[lo] - times[lo - 1] < gap:
            lo -= 1
    flags = mine[lo:hi]
    duplicates = sum(d for _, d, _ in flags)
    return GroupCauses(len(flags), len(flags) - duplicates, sum(late for _, _, late in flags))


@given(st.data())
@settings(max_examples=120, deadline=None)
def test_session_causes_agree_with_their_definition(data) -> None:
    view = data.draw(st.sampled_from([SESSIONS, WITHOUT_ID]))
    gap = view.session.gap_ms
    key_col = view.session.key
    n = data.draw(st.integers(0, 40))
    rows = pa.table(
        {
            ID: data.draw(
                st.lists(st.one_of(st.none(), st.sampled_from("abcdefgh")), min_size=n, max_size=n)
            ),
            "event_time": data.draw(st.lists(st.integers(0, 20 * gap), min_size=n, max_size=n)),
            "partition": data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
            "offset": list(range(n)),
            "prior_watermark": data.draw(
                st.lists(st.one_of(st.none(), st.integers(0, 24 * gap)), min_size=n, max_size=n)
            ),
            key_col: data.draw(
                st.lists(st.one_of(st.none(), st.sampled_from("xyz")), min_size=n, max_size=n)
            ),
        },
        schema=pa.schema(
            [
                (ID, pa.string()),
                ("event_time", pa.int64()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("prior_watermark", pa.int64()),
                (key_col, pa.string()),
            ]
        ),
    )
    causes = SessionCauses(view, rows)
    for _ in range(8):
        key = data.draw(st.one_of(st.none(), st.sampled_from("xyzw")))
        start = data.draw(st.integers(-gap, 21 * gap))
        end = start + data.draw(st.integers(0, 2 * gap))
        assert causes.of(key, start, end) == defined_causes(view, rows, key, start, end)
    late = sum(defined_causes(view, rows, k, -(10**12), 10**12).late for k in (*"xyz", None))
    assert causes.total.events == n and causes.total.late_dropped == late
    if view is WITHOUT_ID:  # every archived record is an event of its own
        assert causes.total.duplicates == 0
        assert all(causes.of(k, -(10**12), 10**12).duplicates == 0 for k in (*"xyz", None))
