"""SessionCauses counts a span's causes with cumulative sums; this holds it to its definition:
walk the key's deliveries in time order, flag repeats of an event id and late drops."""

from __future__ import annotations

import bisect
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


def defined_causes(view, rows: pa.Table, key, start_ms: int, end_ms: int) -> GroupCauses:
    """The causes of one span, by the definition, row by row."""
    gap, lateness, key_col = view.session.gap_ms, view.allowed_lateness_ms, view.session.key
    seen: set = set()
    events: dict = defaultdict(list)
    ordered = rows.sort_by(
        [("event_time", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    ).to_pylist()
    for row in ordered:
        duplicate = row["event_id"] in seen
        seen.add(row["event_id"])
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
    view = SESSIONS
    gap = view.session.gap_ms
    key_col = view.session.key
    n = data.draw(st.integers(0, 40))
    rows = pa.table(
        {
            "event_id": data.draw(st.lists(st.sampled_from("abcdefgh"), min_size=n, max_size=n)),
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
                ("event_id", pa.string()),
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
