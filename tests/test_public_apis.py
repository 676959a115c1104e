"""Sluice uses Dagster's public API only: private modules change without notice between
releases, and the definitions must load on the next minor version."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"^\s*(from|import)\s+dagster[\w]*\._", re.MULTILINE)


def test_no_module_imports_a_private_dagster_module() -> None:
    offenders = [
        f"{path.relative_to(PROJECT)}: {match.group(0).strip()}"
        for package in ("assets", "orchestration", "pipelines", "quality")
        for path in sorted((PROJECT / package).rglob("*.py"))
        for match in PRIVATE.finditer(path.read_text())
    ]
    assert offenders == []
