"""Fixtures of the autoscaling tests."""

from __future__ import annotations

import pytest

from orchestration.control_plane.autoscaling.config import AutoscaleSettings


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> AutoscaleSettings:
    """Default autoscaling settings, immune to SLUICE_AUTOSCALE_* variables of the shell.

    Deliberately overrides the top-level `settings` fixture (the data plane's) in this directory.
    """
    import os

    for key in list(os.environ):
        if key.startswith("SLUICE_AUTOSCALE_"):
            monkeypatch.delenv(key)
    return AutoscaleSettings()
