"""Burrow-style lag evaluation over a sliding window of samples."""

from __future__ import annotations

import pytest

from orchestration.lag import LagSample, lag_status, worst


def _window(offsets, backlogs, age=1.0):
    return [
        LagSample(float(i), o, b, age)
        for i, (o, b) in enumerate(zip(offsets, backlogs, strict=True))
    ]


@pytest.mark.parametrize(
    ("offsets", "backlogs", "age", "expected"),
    [
        ([10, 20, 30, 40], [5, 0, 3, 2], 1.0, "OK"),  # lag reached zero in the window
        ([10, 20, 30, 40], [50, 40, 60, 45], 1.0, "OK"),  # moving, lag not growing throughout
        ([10, 20, 30, 40], [50, 60, 70, 80], 1.0, "WARN"),  # moving, lag growing throughout
        ([10, 10, 10, 10], [50, 50, 60, 70], 1.0, "STALL"),  # not moving while lag > 0
        ([10, 20, 30, 40], [50, 60, 70, 80], 900.0, "STOP"),  # no reports for 15 minutes
        ([10, 20, 5, 40], [5, 5, 5, 5], 1.0, "ERR"),  # offset went backwards
    ],
)
def test_statuses(offsets, backlogs, age, expected):
    assert lag_status(_window(offsets, backlogs, age)) == expected


def test_fleet_status_is_the_worst_task():
    assert worst(["OK", "WARN", "OK"]) == "WARN"
    assert worst(["OK", "STALL", "WARN"]) == "STALL"
    assert worst([]) == "OK"
