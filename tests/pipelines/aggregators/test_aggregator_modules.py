"""SLUICE_AGGREGATOR_MODULES: custom aggregations registered by modules imported at start."""

from __future__ import annotations

import pytest

from pipelines.aggregators import import_modules, names
from pipelines.config import SluiceSettings
from pipelines.exceptions import ConfigError


def test_the_modules_named_are_imported_and_register_their_aggregations(monkeypatch) -> None:
    monkeypatch.setenv("SLUICE_AGGREGATOR_MODULES", " tests.fixtures.poison , ")
    modules = SluiceSettings().aggregator_modules
    assert import_modules(modules) == ["tests.fixtures.poison"]
    assert "fails_on" in names()


def test_a_module_that_does_not_import_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="SLUICE_AGGREGATOR_MODULES: cannot import 'no_such_mod'"):
        import_modules("no_such_mod")
