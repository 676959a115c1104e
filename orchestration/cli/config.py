"""`sluice config`: every option Sluice reads, its effective value and where it came from.

The options are the fields of the settings models (:mod:`pipelines.settings`); each value
comes from the environment, the settings file (``SLUICE_CONFIG_FILE``, default
``./sluice.yaml``) or the field's default, and this command says which. Secrets are masked.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from pipelines.settings import option_rows, settings_file

__all__ = ["SETTINGS_MODELS", "register", "run"]

SETTINGS_MODELS: tuple[tuple[str, str, str], ...] = (
    ("pipelines.config", "SluiceSettings", "state, storage, topics and stream workers"),
    ("pipelines.config", "KafkaSettings", "the Kafka-protocol cluster"),
    ("pipelines.batch.config", "SparkSettings", "the Spark batch correction"),
    ("quality.expectations", "ExpectationSettings", "expectation suites"),
    ("orchestration.settings", "DagsterSettings", "the Dagster code location"),
    ("orchestration.autoscaling.config", "AutoscaleSettings", "autoscaling"),
)
"""(module, model, what it configures), in the order `sluice config` lists them."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "config", help="the effective settings and where each came from (secrets masked)"
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--changed", action="store_true", help="only options not at their default")
    parser.set_defaults(func=run)


def _models():
    import importlib

    for module, name, title in SETTINGS_MODELS:
        model = getattr(importlib.import_module(module), name)
        yield title, model()


def run(args: argparse.Namespace) -> int:
    sections = [
        (title, [r for r in option_rows(settings) if not args.changed or r.source != "default"])
        for title, settings in _models()
    ]
    path = settings_file()
    if args.format == "json":
        payload = {
            "settings_file": str(path) if path else None,
            "options": [
                {"group": title, **row.__dict__} for title, rows in sections for row in rows
            ],
        }
        print(json.dumps(payload, indent=2))
        return 0
    console = Console(soft_wrap=False)
    console.print(f"settings file: {path or 'none (SLUICE_CONFIG_FILE or ./sluice.yaml)'}")
    for title, rows in sections:
        if not rows:
            continue
        table = Table(title=title, title_justify="left", show_lines=False)
        table.add_column("variable", style="bold", no_wrap=True)
        table.add_column("value", overflow="fold")
        table.add_column("source", no_wrap=True)
        table.add_column("description", overflow="fold")
        for row in rows:
            style = None if row.source == "default" else "green"
            table.add_row(row.variable, row.value, row.source, row.description, style=style)
        console.print(table)
    return 0
