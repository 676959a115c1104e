"""Time formats: the column reading (numpy) says what the one-value reading says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.events.declaration import TimeFormat
from pipelines.events.times import column_to_ms, to_ms

_digit = st.sampled_from("0123456789")
_any = st.sampled_from("0123456789-:.+TtZz x\u00e9")


@st.composite
def _iso_like(draw) -> str:
    """ISO-8601 shapes with random digits (most dates and times invalid), sometimes broken."""
    template = draw(
        st.sampled_from(
            [
                "dddd-dd-ddTdd:dd:ddZ",
                "dddd-dd-dd dd:dd:dd.dddz",
                "dddd-dd-ddtdd:dd:dd.d+dd:dd",
                "dddd-dd-ddTdd:dd:dd.ddddddddd-dddd",
                "dddd-dd-ddTdd:dd:dd+dd:dd",
                "dddd-dd-ddTdd:dd:dd.ddddddddddZ",
                "dddd-dd-ddTdd:dd:dd",
            ]
        )
    )
    text = "".join(draw(_digit) if ch == "d" else ch for ch in template)
    if draw(st.integers(0, 4)) == 0:  # a character changed
        k = draw(st.integers(0, len(text) - 1))
        text = text[:k] + draw(_any) + text[k + 1 :]
    return text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_iso_like(), st.text(max_size=30)), min_size=1, max_size=20))
def test_iso_columns_read_as_single_values(values):
    column, bad = column_to_ms(values, TimeFormat.ISO8601)
    expected = [to_ms(v, TimeFormat.ISO8601) for v in values]
    got = [None if bad is not None and bad[i] else int(column[i]) for i in range(len(values))]
    assert got == expected


def test_formats():
    assert to_ms("2014-07-01T08:00:00.250+02:00", TimeFormat.ISO8601) == 1_404_194_400_250
    assert to_ms("2014-07-01T08:00:00", TimeFormat.ISO8601) is None  # no zone: refused
    assert to_ms(1_404_194_400.2506, TimeFormat.EPOCH_S) == 1_404_194_400_251
    assert to_ms(1_404_194_400_250_999, TimeFormat.EPOCH_US) == 1_404_194_400_250
    assert to_ms(True, TimeFormat.EPOCH_MS) is None
    assert to_ms(
        "01/07/2014 10:00:00", TimeFormat.PATTERN, "%d/%m/%Y %H:%M:%S", "Europe/Paris"
    ) == (1_404_201_600_000)
    column, bad = column_to_ms([1, 2.5], TimeFormat.EPOCH_S)
    assert list(column) == [1000, 2500] and bad is None
