"""What every `sluice ... --help` shows: defaults beside each flag, and examples to copy."""

from __future__ import annotations

import argparse

__all__ = ["EXAMPLES", "apply_help_conventions"]

EXAMPLES: dict[str, list[str]] = {
    "up": [
        "sluice up                                   # broker, agents, generator, Dagster",
        "sluice up --no-dagster --duration 6h --exit-when-done",
    ],
    "broker": ["sluice broker start", "sluice broker status --json"],
    "generate": [
        "sluice generate --trace nyc_taxi --duration 6h --speedup 720",
        "sluice generate --events 100000 --no-pace --json",
    ],
    "replay": [
        "sluice replay payments.jsonl --topic payments --key-field merchant",
        "sluice replay payments.csv --topic payments --speedup 60 --time-field created_at",
    ],
    "schema infer": [
        "sluice schema infer --topic payments --sample 5000 > topics.yaml",
        "sluice schema infer --file payments.jsonl --format json",
    ],
    "stream": ["sluice stream --agents 2 --views data/views.yaml"],
    "agent": ['sluice agent --id "$(hostname)"'],
    "worker": ["sluice worker --id w0 --tasks events:0,events:1"],
    "query": [
        "sluice query traffic_by_org --start 2014-07-01T08:00 --end 2014-07-01T09:00",
        "sluice query bytes_quantiles_by_type --start 2014-07-01 --end 2014-07-02 --format csv",
    ],
    "status": ["sluice status", "sluice status --once", "sluice status --json | jq '.[].status'"],
    "views validate": [
        "sluice views validate data/views.yaml",
        "sluice views validate my.yaml --json",
        "sluice views validate my.yaml --deployed",
    ],
    "views list": ["sluice views list", "sluice views list --views data/views.yaml --json"],
    "views schema": ["sluice views schema > data/views.schema.json"],
    "batch correct": ["sluice batch correct --hour 2014-07-01T00 --to 2014-07-02T00"],
    "report": [
        "sluice report --date 2014-07-01 --out reports/",
        "sluice report --date 2014-07-01 --json | jq .headline",
    ],
    "autoscale simulate": [
        "sluice autoscale simulate --trace nyc_taxi --days 28",
        "sluice autoscale simulate --trace Twitter_volume_AAPL --policy mcts --json",
    ],
    "config": [
        "sluice config",
        "sluice config --changed --json",
        "sluice config --defaults --format markdown",
    ],
}
"""Examples per command path, shown at the end of its --help."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each flag's help; descriptions and examples keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        # Nothing to add when the help says it already, or when there is no value to show
        # (None: the setting's default applies; False: a switch that is off).
        if "default" in help_text or action.default in (None, False) or action.required:
            return help_text
        return super()._get_help_string(action)


def apply_help_conventions(parser: argparse.ArgumentParser, path: str = "") -> None:
    """Give ``parser`` and every subcommand under it the formatter and their examples."""
    parser.formatter_class = HelpFormatter
    examples = EXAMPLES.get(path)
    if examples and not parser.epilog:
        parser.epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                apply_help_conventions(sub, f"{path} {name}".strip())
